"""Strict deserialisation for the Redis checkpointer.

`langgraph-checkpoint-redis` keeps values as JSON and rebuilds any dataclass a constructor envelope
names, importing its module, whatever `LANGGRAPH_STRICT_MSGPACK` says. With strict deserialisation
on (the default here), this serializer rebuilds only the types LangGraph lists as safe and leaves
any other envelope as it is, announcing it as blocked: the workflow then refuses the thread in one
line, as it does on PostgreSQL.

A node that fails leaves its error in the checkpoint (LangGraph's `__error__` write). Its JSON
envelope names the exception's class and drops its message, and strict loading refused it, so a
thread whose node met a failure (the records database away during `publish`) could not be read or
resumed. The error is now kept as its text, as LangGraph's msgpack keeps it on PostgreSQL; an
envelope of an exception of Python's or of this program's own, written before, loads as its name.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer
from langgraph.checkpoint.serde import _msgpack
from langgraph.checkpoint.serde.event_hooks import emit_serde_event
from langgraph.checkpoint.serde.jsonplus import _is_safe_json_type


class StrictRedisSerializer(JsonPlusRedisSerializer):
    """The Redis serializer, rebuilding only safe types when strict deserialisation is on: LangGraph's
    safe list for LangGraph's own envelopes, langchain-core's own allow-list for its objects (the
    messages of the LLM analyst), and nothing imported for any other name."""

    def _allowed(self, names: list[str]) -> bool:
        """Whether the graph's allow-list (given through `with_msgpack_allowlist`) names the type."""
        allowed = self._allowed_msgpack_modules
        return isinstance(allowed, set) and (".".join(names[:-1]), names[-1]) in allowed

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, BaseException):  # a failed node's error write: its text, as msgpack keeps it
            obj = repr(obj)
        return super().dumps_typed(obj)

    def _revive_if_needed(self, obj: Any) -> Any:
        if not (_msgpack.STRICT_MSGPACK_ENABLED and _is_constructor(obj)):
            return super()._revive_if_needed(obj)
        names = [str(part) for part in obj["id"]]
        if obj.get("lc") == 2 and (_is_safe_json_type(names) or self._allowed(names)):
            return super()._revive_if_needed(obj)
        if obj.get("lc") == 2 and _is_known_error(names):  # an error write of an earlier release
            return f"{names[-1]}()"
        if obj.get("lc") == 1:  # a langchain-core object: its loader checks the name against its list
            revived = {key: self._revive_if_needed(value) for key, value in obj.items()}
            try:
                return self._reviver(revived)
            except ValueError:
                pass
        emit_serde_event({"kind": "msgpack_blocked", "module": ".".join(names[:-1]), "name": names[-1]})
        return obj


def _is_constructor(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and obj.get("lc") in (1, 2)
        and obj.get("type") == "constructor"
        and isinstance(obj.get("id"), list)
        and len(obj["id"]) >= 2
    )


# The modules whose exceptions a failed node's error write may name, already imported by any process
# that runs the graph: looking a name up in them imports nothing.
_ERROR_MODULES = ("builtins", "market_analyst.errors")


def _is_known_error(names: list[str]) -> bool:
    import sys

    module = sys.modules.get(".".join(names[:-1])) if ".".join(names[:-1]) in _ERROR_MODULES else None
    found = getattr(module, names[-1], None) if module is not None else None
    return isinstance(found, type) and issubclass(found, BaseException)
