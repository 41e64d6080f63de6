"""What the memory store does whatever engine holds its points: the rules the Qdrant Edge store
(`edge`) and the Qdrant server store (`server`) share, written once.

Who may read what (every read is by owner, and checked again on the way out), how a recall is ranked
and cut to its character budget, how a memory is superseded, which embedder's vectors may be compared,
and how a point's vectors are made. Each engine supplies its filters and a few point operations.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypedDict, Unpack

from market_analyst.choices import RecallMode
from market_analyst.errors import UserError
from market_analyst.persistence.memory.embedder import Embedder
from market_analyst.persistence.memory.points import from_payload
from market_analyst.persistence.memory.search import Recall, within_budget
from market_analyst.state import TRAIL_KINDS, Memory, check_memory_ref, validate_user_id


class Ranking(TypedDict, total=False):
    """How a recall ranks (see `search`): the ticker the run analyses, the mode (`hybrid_recency`
    unless given), the moment recency is measured from (now unless given), and whether the relevance
    floor applies (unless False)."""

    ticker: str | None
    mode: RecallMode
    now: datetime | None
    floor: bool


class BaseMemoryStore(ABC):
    """The memory port (`ports.MemoryStore`) over an engine's point operations. Constructing a store
    opens nothing and loads no model: the embedder `embedder` makes is made on first use."""

    def __init__(self, *, embedder: Callable[[], Embedder], location: str) -> None:
        self.location = location
        self._make_embedder = embedder
        self._embedder: Embedder | None = None
        self._bm25: Any = None

    def at_once(self) -> BaseMemoryStore:
        """This store, for calls that must not wait for it: a held store refuses at once."""
        return self

    @property
    def embedder(self) -> Embedder:
        """The embedder, made on first use: a store that only lists or erases never loads a model."""
        if self._embedder is None:
            self._embedder = self._make_embedder()
        return self._embedder

    # -- vectors ---------------------------------------------------------------------------------

    def _words(self) -> Any:
        """Qdrant's BM25 (from `qdrant_edge`): the same tokenizer and term hashing on every engine."""
        if self._bm25 is None:
            from qdrant_edge import Bm25

            self._bm25 = Bm25()
        return self._bm25

    def _embedded(
        self, memories: Sequence[Memory]
    ) -> builtins.list[tuple[Memory, builtins.list[float], Any]]:
        """Each memory with its dense vector (the embedder's) and its BM25 sparse vector."""
        dense = self.embedder.embed([memory.text for memory in memories])
        words = self._words()
        return [
            (memory, vector, words.embed_document(memory.text))
            for memory, vector in zip(memories, dense, strict=True)
        ]

    def _query_vectors(self, recall: Recall) -> tuple[builtins.list[float] | None, Any]:
        """The query's dense vector (None for `bm25`, which loads no model) and its BM25 vector."""
        dense = None if recall.mode == "bm25" else self.embedder.embed([recall.query])[0]
        return dense, self._words().embed_query(recall.query)

    def _refuse_other_embedder(self, meta: Mapping[str, Any], where: str) -> None:
        """`UserError` unless the vectors in `where` were made by this store's embedder, as `meta`
        (what the store recorded when it was made) says."""
        embedder = self.embedder
        if meta.get("embedder") != embedder.name or meta.get("dimension") != embedder.dimension:
            raise UserError(
                f"the memories in {where} were embedded with {meta.get('embedder')} "
                f"({meta.get('dimension')} dimensions), not {embedder.name} ({embedder.dimension}): "
                "run `market-analyst memories reindex` to embed them again"
            )

    # -- owners ----------------------------------------------------------------------------------

    @staticmethod
    def _owned(owner: str, records: Sequence[Any]) -> Memory | None:
        """The memory a retrieval of one ID found, if `owner` owns it: another owner's is absent."""
        if not records:
            return None
        memory = from_payload(records[0].id, dict(records[0].payload or {}))
        return memory if memory.owner == owner else None

    @staticmethod
    def _no_memory(owner: str, memory_id: str) -> UserError:
        return UserError(f"no memory {memory_id} for user {owner}")

    # -- what each engine supplies ---------------------------------------------------------------

    @abstractmethod
    def _owner_filter(self, owner: str, *, live_only: bool) -> Any:
        """The engine's filter for exactly `owner`'s memories (with `live_only`, not superseded)."""

    @abstractmethod
    def _trail_filter(self, owner: str, ticker: str) -> Any:
        """The engine's filter for `owner`'s live memories about `ticker` of the kinds a decision trail
        holds (`TRAIL_KINDS`): owner, status, ticker and kind are indexed payload fields."""

    @abstractmethod
    def _made_before(self, moment: datetime) -> Any:
        """The engine's filter for the memories (of every owner) made before `moment`."""

    @abstractmethod
    def _with_ids(self, ids: Collection[str]) -> Any:
        """The engine's filter for exactly the points `ids` names."""

    @abstractmethod
    def _matching(self, flt: Any, *, with_vectors: bool = False) -> builtins.list[Any]:
        """Every stored record that `flt` (None: all) matches, with its payload; [] with no store."""

    @abstractmethod
    def _count_matching(self, flt: Any) -> int:
        """How many stored points `flt` matches, exactly; 0 with no store."""

    @abstractmethod
    def _erase_matching(self, flt: Any) -> int:
        """Erase every point `flt` matches; returns how many went."""

    @abstractmethod
    def _may_have(self, owner: str) -> bool:
        """False only if `owner` certainly has no memory (cheap: no model, ideally no store opened)."""

    @abstractmethod
    def _search(self, recall: Recall) -> builtins.list[tuple[Memory, float]]:
        """The engine's ranking for `recall` (see `search`), with its score for each memory."""

    @abstractmethod
    def _get(self, owner: str, memory_id: str) -> Memory | None:
        """The memory `memory_id` if `owner` owns it (see `_owned`)."""

    @abstractmethod
    def _supersede(self, owner: str, old_id: str, new: Memory) -> None:
        """Write `new`, then mark `old_id` superseded: a crash between leaves both live, and a repeat
        finishes it."""

    @abstractmethod
    def _forget(self, owner: str, memory_id: str, revive: str | None = None) -> bool:
        """Erase `memory_id` if `owner` owns it (False when not), first making `revive` (the memory it
        replaced) live again: a kill between leaves both live, and a repeat finishes it."""

    @abstractmethod
    def write(self, memories: Sequence[Memory]) -> None:
        """Insert or replace each memory by its ID: writing the same ID twice leaves one memory."""

    @abstractmethod
    def reindex(self) -> int:
        """Embed every memory again with this store's embedder (after a change of model); returns how
        many. The old vectors stay in use until the new ones are all written."""

    # -- the port --------------------------------------------------------------------------------

    def has_memories(self, owner: str) -> bool:
        owner = validate_user_id(owner)
        return self._may_have(owner) and self._count_matching(self._owner_filter(owner, live_only=False)) > 0

    def recall(
        self, owner: str, query: str, *, limit: int = 5, budget_chars: int = 1500, **ranking: Unpack[Ranking]
    ) -> builtins.list[Memory]:
        ranked = self.ranked(owner, query, limit=limit * 4, **ranking)
        return within_budget([memory for memory, _ in ranked], limit=limit, budget_chars=budget_chars)

    def trail(self, owner: str, ticker: str, *, limit: int = 3) -> tuple[builtins.list[Memory], int]:
        """`owner`'s decision trail on `ticker`: the live memories their own threads on it left
        (reviewers' feedback, rejection reasons, approval notes, published reports' summaries), newest
        first, at most `limit` of them, and how many more there are. One filtered lookup, whatever
        the question; no model is loaded, and nothing of another owner's can come out."""
        owner = validate_user_id(owner)
        if limit <= 0 or not self._may_have(owner):
            return [], 0
        records = self._matching(self._trail_filter(owner, ticker))
        found = [from_payload(record.id, dict(record.payload or {})) for record in records]
        found = [
            m
            for m in found
            if m.owner == owner
            and not m.superseded
            and m.ticker == ticker
            and m.kind in TRAIL_KINDS
            and m.thread_id  # left by a thread, not kept by `remember`
        ]
        # Times are kept to the second: within one, a thread's feedback comes before its decision and
        # the decision before its report.
        found.sort(key=lambda m: (m.created_at, TRAIL_KINDS.index(m.kind), m.id), reverse=True)
        return found[:limit], max(0, len(found) - limit)

    def ranked(
        self, owner: str, query: str, *, limit: int = 20, **ranking: Unpack[Ranking]
    ) -> builtins.list[tuple[Memory, float]]:
        """`recall` before the character budget, with the engine's score of each memory (for
        evaluation and tests of the fusion)."""
        owner = validate_user_id(owner)
        if limit <= 0:
            return []
        mode, now = ranking.get("mode", "hybrid_recency"), ranking.get("now") or datetime.now(UTC)
        found = self._search(
            Recall(owner, query, limit, ranking.get("ticker"), mode, now, floor=ranking.get("floor", True))
        )
        # The filter already holds these; checked again so no other owner's memory can ever leave.
        return [(memory, score) for memory, score in found if memory.owner == owner and not memory.superseded]

    def list(self, owner: str, *, include_superseded: bool = False) -> builtins.list[Memory]:
        owner = validate_user_id(owner)
        records = self._matching(self._owner_filter(owner, live_only=not include_superseded))
        memories = [from_payload(record.id, dict(record.payload or {})) for record in records]
        memories = [memory for memory in memories if memory.owner == owner]
        return sorted(memories, key=lambda memory: (memory.created_at, memory.id), reverse=True)

    def get(self, owner: str, memory_id: str) -> Memory | None:
        return self._get(validate_user_id(owner), check_memory_ref(memory_id))

    def kept(self, owner: str, memory_ids: Collection[str]) -> set[str]:
        ids = [check_memory_ref(i) for i in memory_ids]
        if not ids:
            return set()
        owner = validate_user_id(owner)
        return {m.id for m in (self._owned(owner, [r]) for r in self._retrieve_many(ids)) if m is not None}

    @abstractmethod
    def _retrieve_many(self, ids: builtins.list[str]) -> builtins.list[Any]:
        """The points of `ids` the store holds (payloads, no vectors), in one opening."""

    def replace(self, owner: str, old_id: str, new: Memory) -> None:
        owner, old_id = validate_user_id(owner), check_memory_ref(old_id)
        if new.owner != owner:
            raise UserError(f"a memory of {new.owner} cannot replace one of {owner}")
        if new.id == old_id:
            raise UserError(f"memory {old_id} already says that")
        old = self.get(owner, old_id)
        if old is None:
            raise self._no_memory(owner, old_id)
        if old.superseded:  # a chain has one current memory: replace that one
            raise self.replaced_already(owner, old_id)
        self._supersede(owner, old_id, new.model_copy(update={"replaces": old_id, "superseded": False}))

    def current_of(self, owner: str, memory_id: str) -> str | None:
        """The live memory that replaced `memory_id`, following the chain (None: none is live)."""
        chain = {m.replaces: m for m in self.list(owner, include_superseded=True) if m.replaces}
        seen, at = {memory_id}, chain.get(memory_id)
        while at is not None and at.superseded and at.id not in seen:
            seen.add(at.id)
            at = chain.get(at.id)
        return at.id if at is not None and not at.superseded else None

    def replaced_already(self, owner: str, memory_id: str) -> UserError:
        """The refusal of a change to a memory that a newer one replaced, naming the current one."""
        current = self.current_of(owner, memory_id)
        if current is None:
            return UserError(f"memory {memory_id} was replaced, and nothing that replaced it is kept")
        return UserError(f"memory {memory_id} was already replaced by {current}: give --replaces {current}")

    def to_revive(self, owner: str, memory_id: str) -> Memory | None:
        """The memory that forgetting `memory_id` brings back into recall: the one it replaced, when
        `memory_id` is the live end of its chain."""
        memory = self.get(owner, memory_id)
        if memory is None or memory.superseded or memory.replaces is None:
            return None
        before = self.get(owner, memory.replaces)
        return before if before is not None and before.superseded else None

    def forget(self, owner: str, memory_id: str) -> bool:
        owner, memory_id = validate_user_id(owner), check_memory_ref(memory_id)
        before = self.to_revive(owner, memory_id)
        return self._forget(owner, memory_id, revive=before.id if before is not None else None)

    def forget_user(self, owner: str) -> int:
        return self._erase_matching(self._owner_filter(validate_user_id(owner), live_only=False))

    def prune(self, older_than: datetime) -> int:
        return self._erase_matching(self._made_before(older_than))

    def holding(self, test: Callable[[Memory], bool]) -> builtins.list[Memory]:
        """Every memory of any owner that `test` picks: what `forget --including-said-by` looks for
        (another owner's memories of what someone said). Not a read for an owner: never recalled."""
        memories = (from_payload(record.id, dict(record.payload or {})) for record in self._matching(None))
        return [memory for memory in memories if test(memory)]

    def erase(self, ids: Collection[str]) -> int:
        """Erase the memories `ids` names, whoever owns them (as `forget_user` does: by rewriting);
        returns how many went."""
        return self._erase_matching(self._with_ids(ids)) if ids else 0

    def count_before(self, older_than: datetime) -> int:
        """How many memories (of every owner) were made before `older_than`: what `prune` would erase."""
        return self._count_matching(self._made_before(older_than))

    def verify(self) -> None:
        """Check the whole store as a write does first (the Edge store's shard against its manifest;
        a Qdrant server keeps its own files)."""
        return None

    def check(self) -> dict[str, Any]:
        """What `memories check` reports (the Edge store checks its shard against its manifest; a
        Qdrant server keeps its own files, so here it is asked how many memories it holds)."""
        return {
            "store": self.location,
            "ok": True,
            "problem": None,
            "memories": self._count_matching(None),
            "previous": None,
        }

    def restore(self) -> dict[str, Any]:
        """Put back the copy of a store that fails its check (the Edge store's; a server's own
        snapshots restore a server)."""
        raise UserError(
            f"the memory store at {self.location} is a Qdrant server: restore it from its snapshots"
        )

    def all_points(self) -> builtins.list[dict[str, Any]]:
        """Every point with its payload and vectors, for checks of what is stored."""
        return [
            {"id": str(r.id), "payload": dict(r.payload or {}), "vector": _plain(r.vector)}
            for r in self._matching(None, with_vectors=True)
        ]


def every_page(scroll: Callable[[Any], tuple[Sequence[Any], Any]]) -> builtins.list[Any]:
    """Every record of a paged scroll: `scroll(offset)` returns a page and the next offset (None at
    the end), starting from None."""
    records: builtins.list[Any] = []
    offset = None
    while True:
        page, offset = scroll(offset)
        records.extend(page)
        if offset is None or not page:
            return records


def _plain(vector: Any) -> Any:
    if isinstance(vector, dict):
        return {name: _plain(value) for name, value in vector.items()}
    if hasattr(vector, "indices"):
        return {"indices": list(vector.indices), "values": list(vector.values)}
    return vector
