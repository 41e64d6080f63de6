"""The approval inbox: server-rendered pages and a JSON API over the workflow (`market-analyst serve`)."""
