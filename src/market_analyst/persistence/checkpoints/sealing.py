"""Checkpoint values sealed under their thread's data key, through LangGraph's `EncryptedSerializer`.

The savers are subclassed to seal, since only `put` and `put_writes` know whose thread they write:
each channel value and each pending write is wrapped in `Sealed` with the thread's cipher, and the
saver's serializer (`SealingSerializer`, around the saver's own) encrypts what it finds so wrapped.
What a saver keeps in clear is what it needs to find a checkpoint (IDs, channel versions, the
metadata LangGraph fills: source, step, parents and the run's configurable IDs). `None` stays as it is.

Reading needs no thread: the cipher name stored with each blob names the key, and `EncryptedSerializer`
passes a value without one (written before encryption) to the inner serializer unchanged.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from market_analyst.persistence.keys.base import Keyring, ThreadCipher

# How the Redis savers keep a sealed value inside the checkpoint's JSON document.
REDIS_MARK = "__ma_sealed__"


@dataclass(frozen=True, slots=True)
class Sealed:
    """A value to be stored encrypted under `cipher`."""

    value: Any
    cipher: ThreadCipher


class SealingSerializer:
    """The saver's serializer, encrypting `Sealed` values and opening encrypted ones; anything else
    (metadata, a checkpoint document) passes to the saver's own serializer, as do its other methods."""

    def __init__(self, inner: Any, keyring: Keyring) -> None:
        self.inner = inner
        self.keyring = keyring
        self._opener = EncryptedSerializer(keyring, inner)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, Sealed):
            return EncryptedSerializer(obj.cipher, self.inner).dumps_typed(obj.value)
        dumped: tuple[str, bytes] = self.inner.dumps_typed(obj)
        return dumped

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self._opener.loads_typed(data)

    def with_msgpack_allowlist(self, extra_allowlist: Any) -> SealingSerializer:
        """LangGraph's allow-list protocol, as `EncryptedSerializer` takes part in it: this serializer
        around the inner one with the graph's own state types added to its list (itself when the list
        does not change). Without it LangGraph would leave the list as it was and log, on every graph
        bound to the saver, that strict deserialisation is not enforced."""
        inner = self.inner.with_msgpack_allowlist(extra_allowlist)
        return self if inner is self.inner else SealingSerializer(inner, self.keyring)

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "keyring", "_opener"):
            raise AttributeError(name)
        return getattr(self.inner, name)


class AllowlistSaver:
    """A saver that takes the graph's allow-list through its serializer's `with_msgpack_allowlist`.

    LangGraph's own `with_allowlist` asks only its two serializers (`JsonPlusSerializer`, and
    `EncryptedSerializer` around one) and, for any other, keeps the list as it was and logs a warning
    each time a graph is bound to the saver. Mix in before the saver class."""

    serde: Any

    def with_allowlist(self, extra_allowlist: Any) -> Any:
        derive = getattr(type(self.serde), "with_msgpack_allowlist", None)  # the class's, not a delegate
        if derive is None:
            return super().with_allowlist(extra_allowlist)  # type: ignore[misc]
        serde = derive(self.serde, extra_allowlist)
        if serde is self.serde:
            return self
        clone = copy.copy(self)
        clone.serde = serde
        return clone


def thread_of(config: Any) -> str:
    return str(config["configurable"]["thread_id"])


def sealed_writes(keyring: Keyring, config: Any, writes: Any) -> list[tuple[str, Any]]:
    """Pending writes with each value sealed under the thread's key."""
    cipher = keyring.cipher_for(thread_of(config))
    return [(channel, Sealed(value, cipher)) for channel, value in writes]


def redis_sealed_values(
    serde: SealingSerializer, cipher: ThreadCipher, values: dict[str, Any]
) -> dict[str, Any]:
    """Channel values as the Redis savers keep them sealed inside a checkpoint's JSON document."""
    out: dict[str, Any] = {}
    for channel, value in values.items():
        if value is None:
            out[channel] = value
            continue
        kind, blob = serde.dumps_typed(Sealed(value, cipher))
        out[channel] = {REDIS_MARK: kind, "blob": base64.b64encode(blob).decode()}
    return out


def is_redis_sealed(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 2 and isinstance(value.get(REDIS_MARK), str)


def redis_opened(serde: SealingSerializer, value: dict[str, Any]) -> Any:
    return serde.loads_typed((value[REDIS_MARK], base64.b64decode(value["blob"])))
