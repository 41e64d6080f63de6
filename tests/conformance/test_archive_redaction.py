"""A report's redaction on both archives (the directory, the records database): several processes
redacting one report at once each start from what the one before left, so no redaction is lost, and
the hashes they record chain from the report as published to the report as it ends."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from market_analyst.deps import open_archive
from market_analyst.persistence.archive.document import render_document
from tests.support.crashkit import Harness
from tests.support.port_writers import RECORDS, records_environ, records_settings, redact_phrase

PHRASES = [f"phrase number {n} of six" for n in range(6)]


@pytest.fixture(params=RECORDS)
def environ(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""
    return records_environ(request.param, tmp_path / "data", url)


def _report(key: str) -> dict:
    return {
        "schema_version": 1,
        "key": key,
        "operation_id": f"thread-{key}:draft",
        "thread_id": f"thread-{key}",
        "user_id": "bob",
        "ticker": "NVDA",
        "created_at": "2025-02-15T00:00:00+00:00",
        "approved_by": "ann",
        "approved_at": "2025-02-15T00:00:00+00:00",
        "as_of": "2025-02-14",
        "report": {"recommendation": "buy", "headline": "NVDA headline"},
        "markdown": "# NVDA\n" + "\n".join(f"- {phrase}" for phrase in PHRASES) + "\n",
    }


def test_six_processes_redacting_one_report_at_once_lose_no_redaction(
    environ: dict[str, str], harness: Harness
):
    archive = open_archive(records_settings(environ))
    report = _report("NVDA-2025-02-14-redacted")
    archive.publish(report["key"], report)
    other = _report("NVDA-2025-02-14-untouched")
    archive.publish(other["key"], other)

    got = harness.call_together(redact_phrase, [(environ, report["key"], phrase) for phrase in PHRASES])
    stored = archive.get(report["key"])
    assert stored is not None and all(phrase not in stored["markdown"] for phrase in PHRASES)
    assert stored["markdown"].count("[redacted]") == len(PHRASES) and stored["key"] == report["key"]
    # Each redaction recorded the hash of what it found and of what it wrote: one chain, no fork.
    links = dict(tuple(pair) for pair in got)
    assert len(links) == len(PHRASES)
    at = hashlib.sha256(render_document(report)).hexdigest()
    for _ in PHRASES:
        at = links.pop(at)
    assert links == {} and at == hashlib.sha256(render_document(stored)).hexdigest()
    assert archive.get(other["key"]) == other  # another report is as it was
    assert redact_phrase(environ, report["key"], PHRASES[0]) == []  # nothing left to change: no record
