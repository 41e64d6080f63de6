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
    """The Redis serializer, rebuilding only safe types when strict deserialisation is on."""

    def _revive_if_needed(self, obj: Any) -> Any:
        if (
            _msgpack.STRICT_MSGPACK_ENABLED
            and isinstance(obj, dict)
            and obj.get("lc") in (1, 2)
            and obj.get("type") == "constructor"
            and isinstance(obj.get("id"), list)
            and not _is_safe_json_type([str(part) for part in obj["id"]])
        ):
            names = [str(part) for part in obj["id"]]
            emit_serde_event(
                {"kind": "msgpack_blocked", "module": ".".join(names[:-1]), "name": names[-1:][0]}
            )
            return obj
        return super()._revive_if_needed(obj)
