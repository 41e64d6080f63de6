"""What both report archives share: the key rule, the exactly-once rule of `publish` (the same
document again returns the stored one; other content under the key or the operation is refused,
never overwritten), and the commands' way in (`publish_report`, `search`, `list`). The twins are
`files.py` (a directory of JSON documents) and `postgres.py` (the records database)."""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from market_analyst.errors import UserError
from market_analyst.persistence.archive.document import build_document, render_document
from market_analyst.ports import Listing, PublishRequest, PublishResult

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
MAX_KEY_LENGTH = 128


class ArchiveError(UserError):
    """The archive refused a key or a write, or holds a document it cannot read."""


def valid_key(key: str) -> str:
    """`key` if it can only name a file inside the archive, else `ArchiveError`."""
    if not key or len(key) > MAX_KEY_LENGTH or os.path.isabs(key) or not _KEY.fullmatch(key) or ".." in key:
        raise ArchiveError(
            f"invalid archive key {key[:40]!r}: use letters, digits, '-', '_' and single dots; "
            "no path separators, no '..', nothing absolute"
        )
    return key


def settle_repeat(
    key: str, document: dict[str, Any], payload: bytes, existing: dict[str, Any], where: str
) -> PublishResult:
    """A publish that found `existing` under `key`: the stored document when it is `document` again
    (byte for byte, as `payload`), else `ArchiveError` (another operation's report, or the same
    operation with other content, found at `where`): never an overwrite."""
    if render_document(existing) != payload:
        if existing.get("operation_id") != document.get("operation_id"):
            raise ArchiveError(f"archive key {key} already holds another operation's report")
        raise ArchiveError(
            f"operation {document.get('operation_id')} was already published with different content "
            f"({where}); refusing to overwrite it"
        )
    return PublishResult(key, existing, False)


@dataclass(frozen=True)
class Query:
    """What a listing asks for: ticker and user exactly, `text` as a case-blind substring of the
    report, the newest `limit` of them."""

    ticker: str | None
    user_id: str | None
    text: str | None
    limit: int


class Archive(ABC):
    """The archive's operations over one backend (`ports.ReportStore`)."""

    @abstractmethod
    def publish(self, key: str, document: dict[str, Any]) -> PublishResult:
        """Store `document` under `key` once; a repeat of the same document returns the stored one."""

    @abstractmethod
    def redact(
        self, key: str, change: Callable[[dict[str, Any]], dict[str, Any]], record: Callable[[str, str], None]
    ) -> tuple[str, str] | None:
        """Replace the document under `key` by `change(stored document)`: the same report with an
        erased person's words taken out (`forget --including-said-by`), the one change the
        exactly-once rule allows, made from what it holds now (two redactions at once apply one after
        the other) and written in one step, after `record(old, new)` was given the SHA-256 of the old
        bytes and of the new. Returns them, or None when `key` holds nothing or nothing changed."""

    @abstractmethod
    def _search(self, query: Query) -> Listing:
        """The reports `query` asks for, newest first, and how many more matched."""

    def publish_report(self, request: PublishRequest) -> PublishResult:
        """Publish the document of an approved draft under its operation's key (`ports.ArchiveWriter`)."""
        document = build_document(request)
        return self.publish(document["key"], document)

    def search(
        self,
        *,
        ticker: str | None = None,
        user_id: str | None = None,
        text: str | None = None,
        limit: int = 1_000_000,
    ) -> Listing:
        """The newest `limit` reports matching every filter given (ticker and user exactly, text as a
        case-blind substring of the report), and how many more matched; each backend finds them its
        own way, with the same result."""
        return self._search(Query(ticker, user_id, text, limit))

    def list(self) -> Listing:
        """Every readable report, newest first (from the directory archive, with a line for each
        document it cannot read)."""
        return self.search()
