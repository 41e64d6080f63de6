"""Secrets never reach a message: one place that knows where they hide in a store's address.

`redact_url` shows a store's address without its password, whatever the form: a URL with or without
a scheme, a libpq `key=value` string, a URL too broken to parse. `secrets_in` lists the secret values
the settings hold, and `scrub` removes them from any text, so the CLI can pass everything it prints
(messages, warnings, `--debug` tracebacks) through one filter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, unquote

# Variables whose values are addresses that may carry a password, and variables that are secrets.
URL_VARIABLES = ("POSTGRES_URL", "REDIS_URL", "QDRANT_URL", "MA_WEBHOOK_URL", "MA_SMTP_URL")
SECRET_VARIABLES = ("QDRANT_API_KEY", "OPENAI_API_KEY", "MA_MASTER_KEY", "MA_WEBHOOK_SECRET")
# Shorter secrets are still removed from addresses, but not hunted for in free text, where they
# would blot out ordinary words and numbers.
MIN_SCRUBBED_LENGTH = 4
MASK = "***"

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?P<rest>.*)$", re.S)
_KEY_VALUE = re.compile(r"(?P<key>\w+)\s*=\s*(?P<value>'(?:[^'\\]|\\.)*'|\S*)")
_SECRET_KEYS = {"password", "pass", "passwd", "pwd", "api_key", "apikey", "token", "secret"}


def _is_key_value(text: str) -> bool:
    """A libpq `key=value ...` connection string rather than a URL."""
    return "://" not in text and _KEY_VALUE.match(text.strip()) is not None


def _key_value_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for match in _KEY_VALUE.finditer(text):
        value = match["value"]
        if value.startswith("'") and value.endswith("'") and len(value) >= 2:
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        pairs.append((match["key"].lower(), value))
    return pairs


def _split_url(text: str) -> tuple[str, str, str, str]:
    """(scheme, userinfo, host-and-path, query) of a URL, leniently: a missing scheme, a broken host
    or an unescaped '@', '/', '?' or '#' in the password does not stop it (everything before the
    last '@' counts as userinfo, so no part of a password is taken for the host)."""
    match = _SCHEME.match(text.strip())
    scheme, rest = (match["scheme"], match["rest"]) if match else ("", text.strip())
    userinfo, at, where = rest.rpartition("@")
    if not at:
        userinfo, where = "", rest
    where, _, query = where.partition("?")
    return scheme, userinfo, where.partition("#")[0], query


def secrets_of(value: str) -> set[str]:
    """The secret parts of a store address or connection string: its password, in every spelling."""
    found: set[str] = set()
    if not value:
        return found
    if _is_key_value(value):
        found |= {v for k, v in _key_value_pairs(value) if k in _SECRET_KEYS and v}
    else:
        scheme, userinfo, _, query = _split_url(value)
        rest = value.strip()[len(scheme) + 3 :] if scheme else value.strip()
        # Every reading of where the userinfo ends: a password may hold '@' or a query may.
        for at in (i for i, ch in enumerate(rest) if ch == "@"):
            user_and_password = rest[:at]
            if ":" in user_and_password:
                found.add(user_and_password.split(":", 1)[1])
        found |= {v for k, v in parse_qsl(query, keep_blank_values=False) if k.lower() in _SECRET_KEYS}
        found |= {v for k, v in _key_value_pairs(query.replace("&", " ")) if k in _SECRET_KEYS and v}
    return (found | {unquote(s) for s in found}) - {""}


def redact_url(url: str) -> str:
    """The address without its password: scheme, user, host, port and database only."""
    if _is_key_value(url):
        pairs = dict(_key_value_pairs(url))
        user = f"{pairs['user']}@" if pairs.get("user") else ""
        where = pairs.get("host") or pairs.get("hostaddr") or "localhost"
        port = f":{pairs['port']}" if pairs.get("port") else ""
        database = f"/{pairs['dbname']}" if pairs.get("dbname") else ""
        shown = f"postgresql://{user}{where}{port}{database}"
    else:
        scheme, userinfo, where, query = _split_url(url)
        user = userinfo.split(":", 1)[0]
        if where.startswith("/") or not where:  # no host: a socket directory may be named in the query
            socket_dir = dict(parse_qsl(query)).get("host", "")
            where = (socket_dir or "localhost") + where
        shown = (f"{scheme}://" if scheme else "") + (f"{user}@" if user else "") + where
    return scrub(shown, secrets_of(url), min_length=1)


def secrets_in(environ: Mapping[str, str]) -> set[str]:
    """Every secret value the settings in `environ` carry (passwords in addresses, API keys)."""
    found: set[str] = set()
    for name in URL_VARIABLES:
        found |= secrets_of(environ.get(name, ""))
    for name in SECRET_VARIABLES:
        if environ.get(name, "").strip():
            found.add(environ[name].strip())
    return found


def scrub(text: str, secrets: Iterable[str], *, min_length: int = MIN_SCRUBBED_LENGTH) -> str:
    """`text` with every occurrence of each secret replaced by a mask, longest secrets first."""
    for secret in sorted((s for s in secrets if len(s) >= min_length), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
