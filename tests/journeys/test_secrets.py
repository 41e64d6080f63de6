"""No secret in any message, whatever the form of the store's address: a property test over the one
redaction function, and the real CLI (with and without --debug) on generated addresses."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from market_analyst.redaction import URL_VARIABLES, redact_url, scrub, secrets_in
from tests.support.cli import Cli

# Secrets long enough that finding one by chance in ordinary output is impossible.
SECRET = st.text(alphabet=string.ascii_letters + string.digits + "!$%*+-._~", min_size=10, max_size=24).map(
    lambda s: "Zq" + s
)
HOST = st.sampled_from(["127.0.0.1", "localhost", "db.internal", "[::1]", "[::1", "10.0.0.7"])
PORT = st.sampled_from(["", ":1", ":5432", ":6379", ":99999"])
USER = st.sampled_from(["", "a", "analyst", "default", "ann.smith"])


@st.composite
def addresses(draw: st.DrawFn) -> tuple[str, str, str]:
    """(variable, address carrying the secret, the secret) in one of the shapes users write."""
    secret = draw(SECRET)
    user, host, port = draw(USER), draw(HOST), draw(PORT)
    shape = draw(st.integers(0, 7))
    if shape == 0:  # a URL with a scheme
        scheme = draw(
            st.sampled_from(["postgresql", "postgres", "postgresql+psycopg", "redis", "rediss", "http"])
        )
        return "POSTGRES_URL", f"{scheme}://{user}:{secret}@{host}{port}/db", secret
    if shape == 1:  # no scheme at all
        return "REDIS_URL", f"{user}:{secret}@{host}{port}/0", secret
    if shape == 2:  # libpq key=value, plain or quoted
        value = draw(st.sampled_from([secret, f"'{secret}'"]))
        return "POSTGRES_URL", f"host={host.strip('[]')} port=1 user={user or 'x'} password={value}", secret
    if shape == 3:  # the password in the query
        return "POSTGRES_URL", f"postgresql://{host}{port}/db?password={secret}&sslmode=disable", secret
    if shape == 4:  # a Qdrant server URL with credentials
        return "QDRANT_URL", f"http://{user or 'u'}:{secret}@{host}{port}", secret
    if shape == 5:  # an API key
        return draw(st.sampled_from(["QDRANT_API_KEY", "OPENAI_API_KEY"])), secret, secret
    if shape == 6:  # a password holding characters that break URL parsing
        broken = secret[:4] + draw(st.sampled_from(["@", "/", "?", "#", ":"])) + secret[4:]
        return "POSTGRES_URL", f"postgresql://{user}:{broken}@{host}{port}/db", broken
    return "REDIS_URL", f"redis://{user}:{secret}@{host}{port}/0", secret


@given(addresses())
@settings(max_examples=400, deadline=None)
def test_redaction_never_shows_the_secret(address: tuple[str, str, str]):
    name, value, secret = address
    if name in URL_VARIABLES:
        assert secret not in redact_url(value)
    message = f"could not connect with {value}: server said {secret!r} was wrong"
    assert secret not in scrub(message, secrets_in({name: value}))


FIVE_FORMS = [
    {"POSTGRES_URL": "host=127.0.0.1 port=1 password=S3cr3tZq9"},
    {"POSTGRES_URL": "postgresql+psycopg://a:S3cr3tZq9@127.0.0.1:1/db"},
    {"POSTGRES_URL": "a:S3cr3tZq9@127.0.0.1:1/db"},
    {"POSTGRES_URL": "postgresql://a:S3cr3tZq9@[::1:5432/db"},
    {"MA_CHECKPOINTER": "redis", "REDIS_URL": "default:S3cr3tZq9@127.0.0.1:6379/0"},
    {"QDRANT_URL": "http://u:S3cr3tZq9@127.0.0.1:1", "QDRANT_API_KEY": "K3yZq9abcdef"},
]


@pytest.mark.parametrize("env", FIVE_FORMS)
@pytest.mark.parametrize("debug", [False, True])
def test_each_form_fails_cleanly_without_the_secret(cli: Cli, env: dict[str, str], debug: bool):
    args = ("profile", "show", "--user", "ann") if "QDRANT_URL" in env else ("analyze", "NVDA")
    result = cli.run(*args, *(["--debug"] if debug else []), extra_env=env)
    output = result.stdout + result.stderr
    assert "S3cr3tZq9" not in output and "K3yZq9abcdef" not in output, output
    # Malformed addresses are bad input (2); a well-formed one that nobody answers is a service
    # that is unavailable (69), as docs/command-line.md's exit codes say.
    assert result.returncode in (2, 69), output
    if not debug:
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    else:
        assert "Traceback" in result.stderr


@given(addresses())
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_the_cli_never_prints_a_generated_secret(cli: Cli, address: tuple[str, str, str]):
    name, value, secret = address
    env = {name: value} | ({"MA_CHECKPOINTER": "redis"} if name == "REDIS_URL" else {})
    args = ("profile", "show") if name.startswith("QDRANT") else ("threads",)
    for debug in ([], ["--debug"]):
        result = cli.run(*args, *debug, extra_env=env)
        assert secret not in result.stdout + result.stderr
