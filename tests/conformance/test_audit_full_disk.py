"""The file audit log on a real full disk (a small tmpfs): an erasure that cannot write the whole
rewritten log leaves it byte for byte as it was, and says so in one line; an append that cannot
write its whole entry leaves no part of it. Before, a short write was taken for a whole one: `forget`
on a disk with less free space than the log replaced the log with its first part, and an append
left part of a line that made every later read refuse; such a log is now read, and mended by the
next write, which sets the part aside."""

from __future__ import annotations

from pathlib import Path

import pytest

from market_analyst.errors import UserError
from market_analyst.persistence.audit.files import AuditLog
from market_analyst.ports import AuditEvent
from tests.support import disks


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.iterdir() if p.name != ".audit.lock"}


def _log(disk: Path) -> AuditLog:
    log = AuditLog(disk / "audit")
    for i in range(24):  # about 40 KB, most of it the notes
        requester = ("ann", "bob")[i % 2]
        log.append(
            AuditEvent(
                event_id=f"e{i}", action="approved", at="2026-12-04T10:00:00+00:00", thread_id=f"t{i}",
                actor="rev", requester=requester, note=f"{requester}'s note {i}: " + "figures " * 200,
            )
        )  # fmt: skip
    return log


def test_an_erasure_that_does_not_fit_leaves_the_log_as_it_was(tmp_path: Path):
    with disks.small_disk(tmp_path / "disk") as disk:
        log = _log(disk)
        before = _files(log.root)
        assert len(before["audit.jsonl"]) > 3 * 8192
        filler = disks.fill(disk, leave=8192)  # room for a part of the rewritten log only
        with pytest.raises(UserError) as refused:
            log.erase_user("bob", "2026-12-04T11:00:00+00:00")
        message = str(refused.value)
        assert "No space left on device" in message and "nothing was erased from it" in message
        assert "\n" not in message
        assert _files(log.root) == before  # no temporary file left either
        assert log.verify().problem is None
        filler.unlink()
        assert log.erase_user("bob", "2026-12-04T11:00:00+00:00") == 12
        assert log.verify().problem is None and b"bob's note" not in (log.root / "audit.jsonl").read_bytes()


def test_an_append_that_does_not_fit_leaves_no_part_of_its_entry(tmp_path: Path):
    with disks.small_disk(tmp_path / "disk") as disk:
        log = _log(disk)
        before = _files(log.root)
        disks.fill(disk)
        for i in range(3):  # whatever room the last page had is used up on the way
            with pytest.raises(UserError, match="No space left on device; the entry was not written"):
                log.append(AuditEvent(event_id=f"full{i}", action="rejected", at="2026-12-04T10:00:00+00:00",
                                      actor="rev", note="too long to fit " * 300))  # fmt: skip
            assert _files(log.root) == before
        assert log.verify().problem is None


@pytest.mark.parametrize("head_moved", [False, True], ids=["head-kept", "head-moved-by-an-older-release"])
def test_a_log_that_ends_in_part_of_an_entry_is_read_and_mended_by_the_next_write(
    tmp_path: Path, head_moved: bool
):
    """What a short write left (a kill before the cut, or an older release that took a short write for
    a whole one, and may have moved the head to it): reads go on without it, `verify` names it, and
    the next entry written sets it aside and takes its place, so every approval afterwards is
    recorded again."""
    log = AuditLog(tmp_path / "audit")
    for i in range(3):
        log.append(AuditEvent(event_id=f"e{i}", action="approved", at="2026-12-04T10:00:00+00:00",
                              thread_id=f"t{i}", actor="rev", requester="ann"))  # fmt: skip
    whole = (log.root / "audit.jsonl").read_bytes()
    with open(log.root / "audit.jsonl", "ab") as file:
        file.write(b'{"action":"approved","actor":"rev","at":"2026-12-04T10:')
    if head_moved:
        (log.root / "audit.head").write_text('{"hash":"0000","seq":4}\n')
    assert [entry["event_id"] for entry in log.entries()] == ["e0", "e1", "e2"]
    problem = log.verify().problem or ""
    assert ("entry 4 was the last one written" if head_moved else "part of an entry") in problem, problem
    entry = log.append(
        AuditEvent(event_id="e3", action="rejected", at="2026-12-04T10:05:00+00:00", actor="rev")
    )
    assert entry["seq"] == 4 and (log.root / "audit.jsonl").read_bytes().startswith(whole)
    [aside] = log.root.glob("audit.jsonl.torn-*")  # what was there is kept, apart from the log
    assert aside.read_bytes() == b'{"action":"approved","actor":"rev","at":"2026-12-04T10:'
    assert aside.stat().st_mode & 0o777 == 0o600
    assert [e["event_id"] for e in log.entries()] == ["e0", "e1", "e2", "e3"]
    assert log.verify().problem is None
