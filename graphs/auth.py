"""The auth handler `langgraph.json` names for LangGraph's server: every request carries a token from
`market-analyst approvers add` (`Authorization: Bearer <token>`), and each resource answers by the
caller's role (the rules are `market_analyst.workflow.server_auth`). Anything not named here is
refused."""

import asyncio
from typing import Any

from langgraph_sdk import Auth

from market_analyst.settings import Settings
from market_analyst.workflow import server_auth as rules
from market_analyst.workflow.server_saver import thread_owner

SETTINGS = Settings.load()
auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None, headers: dict[Any, Any]) -> Auth.types.MinimalUserDict:
    """The caller a token names (argon2 runs off the event loop), or 401. Agent Inbox sends its key
    as `x-api-key`, which counts as a bearer token."""
    if not authorization:
        key = headers.get(b"x-api-key") or headers.get("x-api-key")
        if key:
            authorization = f"Bearer {key.decode() if isinstance(key, bytes) else key}"
    caller = await asyncio.to_thread(rules.caller_of, SETTINGS, authorization)
    if caller is None:
        raise Auth.exceptions.HTTPException(
            status_code=401, detail="a token is needed: Authorization: Bearer <token from approvers add>"
        )
    return caller.to_user()  # type: ignore[return-value]


def _caller(ctx: Auth.types.AuthContext) -> rules.Caller:
    return rules.caller_from(ctx.user)


@auth.on
async def refuse_the_rest(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """What no handler below names (LangGraph's store among it) is refused."""
    return False


async def _owner(value: Any) -> str | None:
    """Whose thread the request names, if the project already has it (started by a command, or on
    this server before a restart): by the thread index, which the server's checkpointer keeps."""
    thread_id = value.get("thread_id")
    return await thread_owner(SETTINGS, str(thread_id)) if thread_id else None


@auth.on.threads.create
async def thread_create(ctx: Auth.types.AuthContext, value: Any) -> Any:
    return rules.on_thread_create(_caller(ctx), value, await _owner(value))


@auth.on.threads.read
async def thread_read(ctx: Auth.types.AuthContext, value: Any) -> Any:
    caller = _caller(ctx)
    # Only a requester's read depends on whose thread it is: the others are spared the lookup.
    owner = await _owner(value) if caller.role == rules.REQUESTER else None
    return rules.on_thread_read(caller, value, owner)


@auth.on.threads.search
async def thread_search(ctx: Auth.types.AuthContext, value: Any) -> Any:
    return rules.on_thread_read(_caller(ctx), value)


@auth.on.threads.create_run
async def thread_run(ctx: Auth.types.AuthContext, value: Any) -> Any:
    return rules.on_run(_caller(ctx), value, await _owner(value))


@auth.on.threads.update
async def thread_update(ctx: Auth.types.AuthContext, value: Any) -> Any:
    return rules.on_thread_update(_caller(ctx), value)


@auth.on.threads.delete
async def thread_delete(ctx: Auth.types.AuthContext, value: Any) -> Any:
    return rules.operators_only(_caller(ctx), value)


@auth.on.assistants.read
async def assistant_read(ctx: Auth.types.AuthContext, value: Any) -> bool:
    return True


@auth.on.assistants.search
async def assistant_search(ctx: Auth.types.AuthContext, value: Any) -> bool:
    return True


@auth.on.assistants.create
async def assistant_create(ctx: Auth.types.AuthContext, value: Any) -> Any:
    return rules.operators_only(_caller(ctx), value)


@auth.on.assistants.update
async def assistant_update(ctx: Auth.types.AuthContext, value: Any) -> Any:
    return rules.operators_only(_caller(ctx), value)


@auth.on.assistants.delete
async def assistant_delete(ctx: Auth.types.AuthContext, value: Any) -> Any:
    return rules.operators_only(_caller(ctx), value)


@auth.on.crons
async def crons(ctx: Auth.types.AuthContext, value: Any) -> Any:
    return rules.operators_only(_caller(ctx), value)


@auth.on.store
async def store(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Closed: profiles and memories live in the project's own stores."""
    return False
