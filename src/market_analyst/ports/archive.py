"""The archive port: where approved reports are published exactly once, and how commands read them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class PublishResult:
    """The stored document and whether this call wrote it (False: it already existed)."""

    key: str
    document: dict[str, Any]
    created: bool


@dataclass(frozen=True)
class PublishRequest:
    """One publication: the approved draft, its approval, and the operation they make up."""

    operation_id: str  # thread ID + draft ID: a repeat of the same publication is the same operation
    thread_id: str
    user_id: str | None
    draft: dict[str, Any]
    approval: dict[str, Any]


class ArchiveWriter(Protocol):
    """Stores an approved draft once per operation; a repeat returns the stored document."""

    def publish_report(self, request: PublishRequest) -> PublishResult:
        """Write the report `request` describes, unless this operation was written already."""
        ...


@dataclass(frozen=True)
class ReportSummary:
    """The fields `reports list` and `reports search` show, as an archive's index keeps them."""

    key: str
    ticker: str
    user_id: str | None
    created_at: str
    approved_by: str
    recommendation: str
    as_of: str
    headline: str

    def to_json(self) -> dict[str, Any]:
        """The summary as plain data."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Listing:
    """Summaries of readable documents, one line for each document that could not be read, and how
    many more matched than were listed."""

    reports: list[ReportSummary]
    problems: list[str]
    more: int = 0


class ReportStore(ArchiveWriter, Protocol):
    """The whole report archive as commands use it, whichever backend holds it (a directory of JSON
    documents, or PostgreSQL with `MA_RECORDS=postgres`): exactly-once writes, reads by key, listing
    and search newest first, and removal for `forget`."""

    @property
    def location(self) -> str:
        """Where the archive is, for messages (a directory, or a redacted database address)."""
        ...

    def publish(self, key: str, document: dict[str, Any]) -> PublishResult:
        """Store `document` under `key` once; the same document again returns the stored one, other
        content under the same key or operation is refused (`UserError`), never overwritten."""
        ...

    def get(self, key: str) -> dict[str, Any] | None:
        """The document under `key`, None if there is none."""
        ...

    def remove(self, key: str) -> bool:
        """Delete the document under `key`; False when there was none."""
        ...

    def redact(
        self, key: str, change: Callable[[dict[str, Any]], dict[str, Any]], record: Callable[[str, str], None]
    ) -> tuple[str, str] | None:
        """Replace the document under `key` by `change(stored document)`: the same report with an
        erased person's words taken out, made from what it holds now and written in one step, after
        `record(old, new)` was given the SHA-256 of the old bytes and of the new (so the audit log has
        them first). Returns those hashes, or None when `key` holds nothing or nothing changed."""
        ...

    def search(
        self,
        *,
        ticker: str | None = None,
        user_id: str | None = None,
        text: str | None = None,
        limit: int = 1_000_000,
    ) -> Listing:
        """The newest `limit` reports matching every filter given, and how many more matched."""
        ...

    def list(self) -> Listing:
        """Every readable report, newest first."""
        ...

    def check(self) -> str:
        """ "ok" when the archive can be written, else one line saying why not."""
        ...
