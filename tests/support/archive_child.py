"""Publishing one document to the archive some settings select, in a child process of its own (run
by `Harness.call_together`, which lets several children reach the store at the same moment).

`open_for` opens the archive before the child says it is ready; `publish` then returns
{"created": bool, "key": ...}, or {"error": "..."} for a refusal.
"""

from __future__ import annotations

from typing import Any

from market_analyst.deps import open_archive
from market_analyst.errors import UserError
from market_analyst.ports import ReportStore
from market_analyst.settings import Settings


def open_for(environ: dict[str, str], document: dict[str, Any]) -> tuple[ReportStore, dict[str, Any]]:
    return open_archive(Settings.load(environ=environ, dotenv=None)), document


def publish(opened: tuple[ReportStore, dict[str, Any]]) -> dict[str, Any]:
    archive, document = opened
    try:
        result = archive.publish(document["key"], document)
    except UserError as exc:
        return {"error": str(exc)}
    return {"created": result.created, "key": result.key}
