"""The suite's own scheduling: tests that share a costly server run on one worker."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("group-check")


def test_a_test_in_an_xdist_group_carries_the_group_that_loadgroup_schedules_by(
    request: pytest.FixtureRequest,
):
    # Without the suffix (tests/conftest.py, `_group_suffix`), `--dist loadgroup` spreads a group's
    # tests over every worker, and each starts the group's servers again; nothing else would fail.
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("checks a worker of `--dist loadgroup` (make test)")
    assert request.node.nodeid.endswith(
        "::test_a_test_in_an_xdist_group_carries_the_group_that_loadgroup_schedules_by@group-check"
    )
