"""Risk profiles: the store (Qdrant Edge embedded, or a Qdrant server), its sessions and its migration."""
