"""The archive's document schema: what one published report looks like on disk, and its key."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from market_analyst.ports import PublishRequest

SCHEMA_VERSION = 1


def operation_key(ticker: str, as_of: str, operation_id: str) -> str:
    """The archive key of an operation: readable prefix, digest of the operation ID."""
    digest = hashlib.sha256(operation_id.encode()).hexdigest()[:16]
    return f"{ticker.lstrip('^')}-{as_of}-{digest}"


def render_document(document: dict[str, Any]) -> bytes:
    """The canonical bytes of a document: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def build_document(request: PublishRequest) -> dict[str, Any]:
    """The document of one approved draft. Built from the request alone, so a publish re-run after a
    crash builds the very same document (and bytes)."""
    draft, approval = request.draft, request.approval
    report = dict(draft)
    markdown = report.pop("markdown")
    return {
        "schema_version": SCHEMA_VERSION,
        "key": operation_key(draft["ticker"], draft["as_of"], request.operation_id),
        "operation_id": request.operation_id,
        "thread_id": request.thread_id,
        "user_id": request.user_id,
        "ticker": draft["ticker"],
        "created_at": approval["at"],
        # Everyone whose approval counted, in the order they approved (one name without a quorum).
        "approved_by": ", ".join(approval.get("approvers") or [approval["by"]]),
        "approved_at": approval["at"],
        "approval_note": approval.get("note", ""),
        "approval_verified": bool(approval.get("verified", False)),
        "content_hash": approval.get("content_hash"),
        "data_source": draft["data_source"],
        "as_of": draft["as_of"],
        "analyst": draft["analyst"],
        "draft_id": draft["draft_id"],
        "report": report,
        "markdown": markdown,
    }


class ReportBody(BaseModel):
    """The structured report inside a document: the fields a listing shows must be there."""

    model_config = ConfigDict(extra="allow")

    recommendation: str
    headline: str


class ReportDocument(BaseModel):
    """What a readable archive document holds; anything else is skipped by listings and named by `show`."""

    model_config = ConfigDict(extra="allow")

    schema_version: Literal[1]
    key: str
    operation_id: str
    thread_id: str
    user_id: str | None
    ticker: str
    created_at: str
    approved_by: str
    approved_at: str
    as_of: str
    report: ReportBody
    markdown: str


def parse_document(data: bytes) -> dict[str, Any]:
    """The document in `data`, checked against `ReportDocument`; `ValueError` says what is wrong."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ValueError("not a report (a JSON document, but not an object)")
    try:
        ReportDocument.model_validate(document)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        raise ValueError(f"not a valid report ({where}: {first['msg']})") from None
    return document
