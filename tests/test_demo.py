"""`make demo`, exactly as the README names it, on a fresh data directory with the embedded PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import clean_environ
from tests.support.make import run_make
from tests.support.services import discard_embedded_postgres


def test_make_demo_publishes_one_report_from_a_second_process(tmp_path: Path):
    data_dir = tmp_path / "demo-data"
    try:
        result = run_make("demo", env=clean_environ() | {"MA_DATA_DIR": str(data_dir)}, timeout=300)
        assert "approve it from a second process" in result.stdout
        documents = list((data_dir / "reports").glob("*.json"))
        assert len(documents) == 1
        document = json.loads(documents[0].read_text())
        assert "bundled snapshot, as of 2025-02-14" in document["markdown"]
        assert document["report"]["data_source"] == "bundled snapshot, as of 2025-02-14"
        assert (data_dir / "postgres" / "PG_VERSION").exists()  # the embedded server, in the data dir
    finally:
        discard_embedded_postgres(data_dir / "postgres")
