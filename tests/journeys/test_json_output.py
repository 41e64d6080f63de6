"""`--json` of the run commands against its documented schema (docs/thread.schema.json): every
field once, the draft's figures at full precision, and a schema that names what the models hold."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from jsonschema import Draft202012Validator

from market_analyst.state import Approval, Draft, Publication
from market_analyst.workflow.views import ThreadView
from tests.support import REPO
from tests.support.cli import Cli, unique_id

SCHEMA = json.loads((REPO / "docs" / "thread.schema.json").read_text())


def _valid(data: Any) -> dict[str, Any]:
    errors = sorted(Draft202012Validator(SCHEMA).iter_errors(data), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    assert isinstance(data, dict)
    return data


def test_the_schema_is_valid_and_names_every_field_the_models_hold():
    Draft202012Validator.check_schema(SCHEMA)
    defs = SCHEMA["$defs"]
    assert set(defs["draft"]["properties"]) == set(Draft.model_fields)
    assert set(defs["approval"]["properties"]) == set(Approval.model_fields)
    assert set(defs["publication"]["properties"]) == set(Publication.model_fields)
    view_fields = {f.name for f in dataclasses.fields(ThreadView)} - {"extra"}
    command_extras = {"pending_node", "revision", "feedback", "options", "changes", "forked_from"}
    assert set(SCHEMA["properties"]) == view_fields | command_extras


def test_a_thread_prints_its_figures_once_and_matches_the_schema_at_every_step(cli: Cli):
    thread = unique_id("schema")
    analyzed = _valid(cli.ok("analyze", "TSLA", "--thread-id", thread, "--json").json())
    # The draft, and so its figures, appear once: nothing of it is copied to the top level.
    assert json.dumps(analyzed).count('"figures"') == 1
    assert analyzed["pending_node"] == "human_review" and analyzed["status"] == "awaiting_approval"
    figures = analyzed["draft"]["figures"]
    assert figures["price"] == 333.0367 and figures["sma_50"] == 299.7205  # full precision, not 333.04

    revised = _valid(cli.ok("revise", thread, "--feedback", "shorter, please", "--json").json())
    assert revised["revision"] == 2
    # The built-in rules cannot act on free text: only the feedback section changed, not the analysis.
    assert revised["changes"]["lines_added"] == revised["changes"]["lines_removed"] == 0
    assert _valid(cli.ok("status", thread, "--json").json())["draft"] == revised["draft"]

    approved = _valid(cli.ok("approve", thread, "--user", "bob", "--json").json())
    assert approved["status"] == "published" and approved["pending_node"] is None
    assert approved["approval"]["draft_id"] == revised["draft"]["draft_id"]
    assert approved["publication"]["key"]

    other = cli.ok("analyze", "NFLX", "--json").json()["thread_id"]
    rejected = _valid(cli.ok("reject", other, "--reason", "not now", "--json").json())
    assert rejected["status"] == "rejected" and rejected["approval"]["note"] == "not now"


def test_a_fork_matches_the_schema(cli: Cli):
    thread = cli.ok("analyze", "MSFT", "--json").json()["thread_id"]
    [entry] = [e for e in cli.ok("history", thread, "--json").json() if e["node"] == "fetch_market_data"]
    forked = _valid(cli.ok("fork", thread, "--checkpoint", entry["checkpoint_id"], "--json").json())
    assert forked["forked_from"] == {"thread_id": thread, "checkpoint_id": entry["checkpoint_id"]}
