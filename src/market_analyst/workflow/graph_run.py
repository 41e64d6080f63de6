"""A command's run over the checkpointer: the compiled graph over an open saver, the thread's lease,
and the dependencies the nodes get, built on first use (the first `advance`, or the first read of
`Run.deps`), so that a command that only reads threads builds no adapter but the checkpointer."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from market_analyst.choices import Durability
from market_analyst.context import Deps
from market_analyst.decisions import Identity
from market_analyst.deps import open_run_stores
from market_analyst.errors import ServiceUnavailable, UserError, outage_in
from market_analyst.graph import graph_over
from market_analyst.ports import CheckpointBackend
from market_analyst.settings import Settings
from market_analyst.workflow.views import config_for

Progress = Callable[[str], None]


@dataclass
class Run:
    """The compiled graph over an open checkpointer, and the dependencies its nodes get."""

    graph: Any
    settings: Settings
    backend: CheckpointBackend
    make_deps: Callable[[], Deps]  # what builds `deps`, the first time it is read
    _deps: Deps | None = field(default=None, repr=False)
    # Whether this run holds a final approval (saved: `record_decision` ran after the gate's
    # checkpoint, or one saved before this run) and whether `publish` finished: what a lost store's
    # message may say was kept.
    approved: bool = False
    published: bool = False

    @property
    def deps(self) -> Deps:
        """The dependencies the nodes get, built the first time they are asked for."""
        if self._deps is None:
            self._deps = self.make_deps()
        return self._deps

    def advance(
        self, inputs: Any, thread_id: str, progress: Progress | None, *, durability: Durability | None = None
    ) -> None:
        """Run the thread from its last checkpoint (or from `inputs`) to the gate or the end, with the
        settings' durability unless `durability` is given."""
        stream = self.graph.stream(
            inputs,
            config_for(thread_id),
            context=self.deps,
            stream_mode="updates",
            durability=durability or self.settings.durability,
        )
        for update in stream:
            for node, change in update.items():
                if node.startswith("__"):
                    continue
                approval = (change or {}).get("approval") if isinstance(change, dict) else None
                if node == "record_decision" and (approval or {}).get("decision") == "approved":
                    self.approved = True
                self.published |= node == "publish"
                if progress is not None:
                    progress(f"done: {node}")


@contextmanager
def open_run(
    settings: Settings,
    thread_id: str | None = None,
    deps: Deps | None = None,
    progress: Progress | None = None,
    *,
    identity: Identity | None = None,
) -> Iterator[Run]:
    """The graph over an open checkpointer, holding the thread's lease if one is named; the nodes get
    `deps`, or the dependencies `settings` describe, built when the run first needs them, deciding as
    `identity` when one is given.

    A checkpointer that goes away mid-command becomes one `ServiceUnavailable`: what finished before
    the last checkpoint is kept, and `resume` continues from there once the server is back."""
    run: Run | None = None
    with open_run_stores(settings, progress) as (backend, build_deps):

        def make_deps() -> Deps:
            built = deps or build_deps()
            return built if identity is None else dataclasses.replace(built, identity=identity)

        try:
            run = Run(graph_over(backend.saver), settings, backend, make_deps)
            if thread_id is None:
                yield run
            else:
                with backend.lease(thread_id):
                    yield run
        except Exception as exc:
            lost_store = not isinstance(exc, ServiceUnavailable | UserError) and outage_in(
                exc, backend.outage_errors
            )
            if not (lost_store or isinstance(exc, ServiceUnavailable)):
                raise
            then = f"; continue with 'market-analyst resume {thread_id}'" if thread_id else ""
            if lost_store:
                detail = " ".join(str(exc).split())[:160] or type(exc).__name__
                what = f"lost the checkpointer at {backend.description} ({detail})"
                back = backend.restart_hint
            else:  # another store the run needs (the records database) was away
                what = str(exc)
                back = "when it is back"
            if run is not None and run.approved and not run.published:
                # What was written first: the approval is saved; its report may or may not be.
                raise ServiceUnavailable(
                    f"approval recorded; publishing did not finish: {what}; it will be retried ({back}): "
                    f"a running 'market-analyst serve' publishes it on its own{then}"
                ) from None
            if not lost_store:
                raise
            raise ServiceUnavailable(f"{what}; nothing that finished was lost: {back}{then}") from None
