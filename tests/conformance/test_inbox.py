"""What the approval inbox reads through the workflow, on each real checkpointer: the drafts waiting
for a decision, a thread with the drafts it has had, and whether the stores answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from market_analyst.settings import Settings
from market_analyst.workflow import approve_thread, revise_thread, start_analysis
from market_analyst.workflow.health import check_stores
from market_analyst.workflow.inbox import find_thread, pending_drafts, thread_details
from tests.support.backends import BACKENDS, checkpointer_env
from tests.support.cli import unique_id


@pytest.fixture(params=BACKENDS)
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    environ = {"MA_DATA_DIR": str(tmp_path / "data")} | checkpointer_env(request, request.param)
    return Settings.load(environ=environ, dotenv=None)


def test_pending_drafts_are_the_threads_at_the_gate_newest_first(settings: Settings):
    first, second, done = unique_id("in-1"), unique_id("in-2"), unique_id("in-done")
    start_analysis(settings, "NVDA", thread_id=first, user="ann", question="Hold?")
    start_analysis(settings, "MSFT", thread_id=second, user="bob")
    start_analysis(settings, "TSLA", thread_id=done)
    approve_thread(settings, done, user="carol")
    rows = [row for row in pending_drafts(settings) if row.thread_id in (first, second, done)]
    assert [row.thread_id for row in rows] == [second, first]
    assert (rows[1].ticker, rows[1].user_id, rows[1].question, rows[1].revision) == (
        "NVDA",
        "ann",
        "Hold?",
        1,
    )
    assert rows[0].drafted_at >= rows[1].drafted_at and rows[0].recommendation in ("buy", "hold", "sell")


def test_thread_details_keep_every_draft_for_the_revision_diff(settings: Settings):
    thread = unique_id("in-rev")
    first = start_analysis(settings, "NVDA", thread_id=thread).draft
    revise_thread(settings, thread, feedback="say more about the drawdown")
    details = thread_details(settings, thread)
    assert details is not None and details.view.status == "awaiting_approval"
    assert [d["revision"] for d in details.drafts] == [1, 2]
    assert details.drafts[0]["draft_id"] == first["draft_id"] and details.updated_at
    assert details.drafts[1]["feedback"] == ["say more about the drawdown"]
    assert thread_details(settings, unique_id("in-none")) is None
    assert find_thread(settings, unique_id("in-none")) is None


def test_check_stores_names_what_does_not_answer(settings: Settings, tmp_path: Path):
    assert check_stores(settings) == {"checkpointer": "ok", "profiles": "ok", "archive": "ok"}
    blocked = tmp_path / "file"
    blocked.write_text("")
    down = settings.with_overrides(
        postgres_url="postgresql://ma@127.0.0.1:9/none",
        redis_url="redis://127.0.0.1:9/0",
        archive_dir_override=blocked / "reports",
    )
    checks = check_stores(down)
    assert checks["checkpointer"].startswith("cannot connect to") and checks["profiles"] == "ok"
    assert checks["archive"] == f"cannot write to archive directory {blocked / 'reports'}"
