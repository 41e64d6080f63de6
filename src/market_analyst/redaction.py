"""How a store's address appears in messages: never with its password."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit


def redact_url(url: str) -> str:
    """The URL without its password: scheme, user, host, port and database only."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparseable URL>"
    if not host:
        socket_dir = parse_qs(parts.query).get("host", [""])[0]
        host = socket_dir or "localhost"
    user = f"{parts.username}@" if parts.username else ""
    where = f"{host}:{port}" if port else host
    return f"{parts.scheme}://{user}{where}{parts.path}"
