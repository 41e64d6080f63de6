"""One small module per node; each returns a partial state update."""
