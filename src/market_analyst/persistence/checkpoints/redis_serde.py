"""Strict deserialisation for the Redis checkpointer.

`langgraph-checkpoint-redis` keeps values as JSON and rebuilds any dataclass a constructor envelope
names, importing its module, whatever `LANGGRAPH_STRICT_MSGPACK` says. With strict deserialisation
on (the default here), this serializer rebuilds only the types LangGraph lists as safe and leaves
any other envelope as it is, announcing it as blocked: the workflow then refuses the thread in one
line, as it does on PostgreSQL.
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

    def _revive_if_needed(self, obj: Any) -> Any:
        if not (_msgpack.STRICT_MSGPACK_ENABLED and _is_constructor(obj)):
            return super()._revive_if_needed(obj)
        names = [str(part) for part in obj["id"]]
        if obj.get("lc") == 2 and _is_safe_json_type(names):
            return super()._revive_if_needed(obj)
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
