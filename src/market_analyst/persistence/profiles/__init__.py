"""Risk profiles: `store` (the one a command opens) over `base` (what a session does on any engine)
and its engines: `edge` (Qdrant Edge embedded, made and migrated to by `edge_setup`), `local_mode`
(`qdrant-client`'s folders) and `server` (a Qdrant server)."""
