"""Publishes one document to the archive the environment selects, in a process of its own, starting
only once a go-file exists, so that several children reach the store at the same moment.

    python -m tests.support.archive_child GO_FILE DOCUMENT_FILE

Prints one JSON line: {"created": bool, "key": ...}, or {"error": "..."} for a refusal.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from market_analyst.deps import open_archive
from market_analyst.errors import UserError
from market_analyst.settings import Settings


def main(go: Path, document_file: Path) -> None:
    document = json.loads(document_file.read_text())
    archive = open_archive(Settings.load(dotenv=None))
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.002)
    try:
        result = archive.publish(document["key"], document)
    except UserError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return
    print(json.dumps({"created": result.created, "key": result.key}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
