"""`make demo`, exactly as the README names it, on a fresh data directory with the embedded PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, clean_environ


def test_make_demo_publishes_one_report_from_a_second_process(tmp_path: Path):
    data_dir = tmp_path / "demo-data"
    venv = Path(sys.executable).parent.parent
    try:
        result = subprocess.run(
            ["make", "demo", f"VENV={venv}"],
            cwd=REPO,
            env=clean_environ() | {"MA_DATA_DIR": str(data_dir)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "approve it from a second process" in result.stdout
        documents = list((data_dir / "reports").glob("*.json"))
        assert len(documents) == 1
        document = json.loads(documents[0].read_text())
        assert "bundled snapshot, as of 2025-02-14" in document["markdown"]
        assert document["report"]["data_source"] == "bundled snapshot, as of 2025-02-14"
        assert (data_dir / "postgres" / "PG_VERSION").exists()  # the embedded server, in the data dir
    finally:
        from market_analyst.services import stop_embedded_postgres

        stop_embedded_postgres(data_dir / "postgres")
