"""Running a test once per checkpointer."""

from __future__ import annotations

import pytest

BACKENDS = ("postgres", "redis")
# Run a CLI test once per checkpointer: `@both_backends` on a test that takes the `cli` fixture.
both_backends = pytest.mark.parametrize("cli", BACKENDS, indirect=True)


def checkpointer_env(request: pytest.FixtureRequest, backend: str) -> dict[str, str]:
    """The variables that point the application at this test's store on `backend`."""
    if backend == "redis":
        return {"MA_CHECKPOINTER": "redis", "REDIS_URL": request.getfixturevalue("redis_url")}
    return {"POSTGRES_URL": request.getfixturevalue("postgres_url")}
