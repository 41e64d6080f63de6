"""Words go with their speaker: what `forget --user X` finds of X's words in other people's records,
and how `--including-said-by` takes them out.

X's words are the notes, reasons and feedback X gave as someone else's reviewer or approver: the
decisions X made on other users' threads (as each thread and the audit log recorded them), the
memories other owners keep of what X said, and the approval notes of reports X approved. Wherever
one of those texts appears afterwards (the thread's later drafts and model turns, a memory another
draft recalled, an archived report), it is replaced with `REDACTED`, which names no one. A thread
is re-written under a new data key and the old key erased, so its older copies (WAL, AOF, backups)
go unreadable; a decision's seal is made again over the redacted note, so the claim it carries (this
person decided this draft) still holds. X's name stays where it records who decided."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from market_analyst.decisions import Decision, DecisionSeal, content_hash, first_error
from market_analyst.errors import ThreadBusy, UserError
from market_analyst.ports import AuditEvent, AuditRecords, MemoryStore, ReportStore, ThreadRow
from market_analyst.rendering import plain
from market_analyst.state import Memory, memory_text
from market_analyst.workflow.graph_run import Run
from market_analyst.workflow.views import UnreadableThread, saved_values

REDACTED = "[redacted: the words of an erased user]"
# A text shorter than this is taken out only where a value is exactly that text and the field says
# whose words it holds: inside a longer one, "ok" or "fine" would take other people's words with it.
SHORTEST_QUOTED = 8
# The memories whose whole text is what `said_by` said; a report's memory names its approvers but
# holds the analyst's words.
WORD_KINDS = frozenset({"feedback", "rejection", "approval_note"})
# The fields that hold people's and the analyst's words (and everything inside them: a message's
# content blocks, a tool call's arguments). Every other field is structure (IDs, kinds, statuses,
# actions, recommendations, tickers, sources, dates, hashes, seals), and is never changed: a note
# that reads "approve" or "buy" must not rewrite a decision's action or a report's recommendation.
FREE_TEXT = frozenset(
    {
        "note", "feedback", "markdown", "description", "text", "content", "headline", "summary",
        "framing", "facts", "question", "response", "memory_response", "refused", "approval_note",
        "risk_factors", "args", "arguments", "reason",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Words:
    """What one speaker said, in every form the stores keep it: as typed, as a memory's text, as
    the Markdown a draft quotes it in, and JSON-escaped (as a model's prompt may carry it)."""

    speaker: str
    forms: tuple[str, ...] = ()

    @classmethod
    def of(cls, speaker: str, texts: Iterable[str]) -> Words:
        found: set[str] = set()
        for raw in texts:
            text = raw.strip()
            if text and text != REDACTED:
                found |= {text, memory_text(text), plain(text), json.dumps(text)[1:-1]}
        found = {form for form in found if form and form not in REDACTED}  # the marker is never words
        return cls(speaker, tuple(sorted(found, key=lambda form: (-len(form), form))))  # longest first

    @functools.cached_property
    def _quoted(self) -> re.Pattern[str] | None:
        long = [re.escape(form) for form in self.forms if len(form) >= SHORTEST_QUOTED]
        return re.compile("|".join(long)) if long else None

    def out_of(self, text: str, *, whole: bool = False) -> str:
        """`text` with the speaker's words replaced by `REDACTED`, in one pass over it (a marker it
        puts in is never searched again, so a second pass changes nothing); with `whole`, where the
        field holds the speaker's own words, a shorter text is replaced too when it is the whole
        value. The same object when nothing was there."""
        if not self.forms or not text:
            return text
        if text in self.forms and (whole or len(text) >= SHORTEST_QUOTED):
            return REDACTED
        if self._quoted is None:
            return text
        new = self._quoted.sub(REDACTED, text)
        return text if new == text else new

    def held_in(self, value: Any, channel: str | None = None) -> bool:
        return _walk(value, self, _unsealed, key=channel) is not value


Reseal = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def _unsealed(_old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return new


def _walk(value: Any, words: Words, reseal: Reseal, *, key: str | None = None, free: bool = False) -> Any:
    """`value` with `words` taken out of its free text (see `FREE_TEXT`; `key` is the field or channel
    it is the value of), rebuilt only where something changed (an untouched value comes back as the
    very object). A dict that changed is passed to `reseal` with the original, so a sealed decision
    can be sealed again; a decision or approval the speaker made loses its note whatever its length."""
    free = free or key in FREE_TEXT
    if isinstance(value, str):
        return words.out_of(value, whole=key == "feedback") if free else value
    if isinstance(value, dict):
        items = {name: _walk(item, words, reseal, key=str(name), free=free) for name, item in value.items()}
        note = items.get("note")
        if value.get("by") == words.speaker and isinstance(note, str) and note.strip() and note != REDACTED:
            items["note"] = REDACTED
        if all(items[name] is value[name] for name in value):
            return value
        return reseal(value, items)
    if isinstance(value, list | tuple):
        walked = [_walk(item, words, reseal, key=key, free=free) for item in value]
        if all(new is old for new, old in zip(walked, value, strict=True)):
            return value
        if isinstance(value, list):
            return walked
        return type(value)(*walked) if hasattr(value, "_fields") else tuple(walked)
    if isinstance(value, BaseModel):
        fields = {name: getattr(value, name) for name in type(value).model_fields}
        changed = {name: _walk(item, words, reseal, key=name, free=free) for name, item in fields.items()}
        changed = {name: item for name, item in changed.items() if item is not fields[name]}
        return value.model_copy(update=changed) if changed else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value) if f.init]
        changed = {name: _walk(getattr(value, name), words, reseal, key=name, free=free) for name in names}
        changed = {name: item for name, item in changed.items() if item is not getattr(value, name)}
        return dataclasses.replace(value, **changed) if changed else value
    if type(value).__name__ == "Send" and hasattr(value, "arg"):
        arg = _walk(value.arg, words, reseal, free=free)
        return value if arg is value.arg else type(value)(value.node, arg)
    return value


def _notes_by(value: Any, speaker: str) -> Iterable[str]:
    """The notes of every decision (or approval) in `value` that `speaker` made."""
    if isinstance(value, dict):
        if value.get("by") == speaker and isinstance(value.get("note"), str):
            yield value["note"]
        for item in value.values():
            yield from _notes_by(item, speaker)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _notes_by(item, speaker)


def _values(run: Run, thread_id: str, unreadable: list[str]) -> list[tuple[str, Any]]:
    """Every value the thread holds, opened, with its channel; [] (the thread named in `unreadable`)
    when it cannot be read here: its key erased or held elsewhere, or a type refused. Its words
    cannot be read either, and it is left as it is."""
    try:
        return saved_values(run.backend.saver, thread_id)
    except UnreadableThread:
        if thread_id not in unreadable:
            unreadable.append(thread_id)
        return []


@dataclass
class SaidBy:
    """What was found (or redacted) of someone's words in records other than their own: threads,
    memories and archived reports."""

    threads: list[str] = field(default_factory=list)
    memories: int = 0
    reports: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # threads that cannot be read here: not searched

    @property
    def total(self) -> int:
        return len(self.threads) + self.memories + len(self.reports)


class Quotes:
    """Where `words` appear in the threads of `rows` and in the archived reports `reports` lists (asked
    when they are searched, so a report published meanwhile is not missed), and how they come out: a
    thread re-written under a new data key (its decisions sealed again), a report re-written under
    its key, from what it holds then, after the audit log recorded its old and new content hashes."""

    def __init__(
        self,
        run: Run,
        words: Words,
        *,
        rows: list[ThreadRow],
        reports: Callable[[], list[dict[str, Any]]],
        archive: ReportStore,
        audit: AuditRecords,
        why: str,
    ) -> None:
        self.run, self.words, self.rows, self.reports = run, words, rows, reports
        self.archive, self.audit, self.why = archive, audit, why
        self.unreadable: list[str] = []

    def found(self) -> SaidBy:
        """The threads and reports holding the words, changing nothing."""
        if not self.words.forms:
            return SaidBy()
        threads = [
            row.thread_id
            for row in self.rows
            if any(self.words.held_in(v, c) for c, v in _values(self.run, row.thread_id, self.unreadable))
        ]
        reports = [str(d["key"]) for d in self.reports() if self.words.held_in(d)]
        return SaidBy(threads, 0, reports, unreadable=self.unreadable)

    def redact(self, seals: tuple[DecisionSeal, ...], at: str) -> SaidBy:
        """Take the words out of every thread and report that holds them. A busy thread is kept and
        named (the command says to run it again)."""
        result = SaidBy(unreadable=self.unreadable)
        if not self.words.forms:
            return result
        for row in self.rows:
            try:
                if self._redact_thread(row.thread_id, seals):
                    result.threads.append(row.thread_id)
            except ThreadBusy:
                result.busy.append(row.thread_id)
        for document in self.reports():  # listed after the threads: what they published is in it
            if self.words.held_in(document) and self._redact_report(document, at):
                result.reports.append(str(document["key"]))
        return result

    def _redact_report(self, document: dict[str, Any], at: str) -> bool:
        key = str(document["key"])

        def record(old: str, new: str) -> None:  # first: a kill before the write leaves it to a re-run
            self.audit.append(
                AuditEvent(
                    event_id=f"redacted:{key}:{new}",
                    action="redacted",
                    at=at,
                    thread_id=document.get("thread_id"),
                    draft_id=document.get("draft_id"),
                    archive_key=key,
                    note=f"{self.why} were taken out: sha256 {old} became {new}",
                )
            )

        def change(stored: dict[str, Any]) -> dict[str, Any]:
            return dict(_walk(stored, self.words, _unsealed))

        return self.archive.redact(key, change, record) is not None

    def _redact_thread(self, thread_id: str, seals: tuple[DecisionSeal, ...]) -> bool:
        reseal = resealer(thread_id, seals)
        backend = self.run.backend
        with backend.lease(thread_id):
            held = any(self.words.held_in(v, c) for c, v in _values(self.run, thread_id, self.unreadable))
            # A re-keying killed after its values were written under the staged key finds no words
            # left, and still promotes the key, so the old one and every copy under it go.
            if not held and not backend.rekey_interrupted(thread_id):
                return False
            changed = backend.rekey_thread(thread_id, lambda c, v: _walk(v, self.words, reseal, key=c))
            return changed > 0 or held


def reports_of(archive: ReportStore, keep: Callable[[str | None], bool]) -> list[dict[str, Any]]:
    """The archived documents of every owner `keep` picks."""
    return [
        document
        for summary in archive.search().reports
        if keep(summary.user_id) and (document := archive.get(summary.key)) is not None
    ]


class SpeakerWords:
    """One speaker's words in everyone else's threads, memories and reports (`forget --user`)."""

    def __init__(
        self,
        run: Run,
        speaker: str,
        *,
        others: list[ThreadRow],
        memories: MemoryStore,
        archive: ReportStore,
        audit: AuditRecords,
    ) -> None:
        self.speaker, self.memory_store = speaker, memories
        texts: list[str] = []
        for entry in audit.entries():  # before `forget` erases the speaker's entries
            if entry.get("actor") == speaker and isinstance(entry.get("note"), str):
                texts.append(entry["note"])
        unreadable: list[str] = []
        for row in others:
            for _channel, value in _values(run, row.thread_id, unreadable):
                texts.extend(_notes_by(value, speaker))
        self.said = memories.holding(
            lambda memory: memory.owner != speaker and memory.said_by == speaker and memory.kind in WORD_KINDS
        )
        texts += [memory.text for memory in self.said]
        reports = reports_of(archive, lambda owner: owner != speaker)
        # A report's note is its last approver's (the one whose approval completed the quorum).
        texts += [
            str(d.get("approval_note") or "")
            for d in reports
            if str(d.get("approved_by") or "").split(", ")[-1] == speaker
        ]
        self.words = Words.of(speaker, texts)
        self.quotes = Quotes(
            run,
            self.words,
            rows=others,
            reports=lambda: reports_of(archive, lambda owner: owner != speaker),
            archive=archive,
            audit=audit,
            why="an erased user's words",
        )
        self.quotes.unreadable = unreadable

    def _memories(self) -> list[Memory]:
        """The memories of the speaker's words: said by them, or another copy of one of their texts
        (a memory that only quotes a phrase of theirs is someone else's words, and stays)."""
        said = {memory.id for memory in self.said}
        forms = set(self.words.forms)

        def copy(memory: Memory) -> bool:
            return memory.owner != self.speaker and memory.id not in said and memory.text in forms

        return [*self.said, *(self.memory_store.holding(copy) if forms else [])]

    def found(self) -> SaidBy:
        """Where the speaker's words are, changing nothing."""
        found = self.quotes.found()
        found.memories = len(self._memories())
        return found

    def redact(self, seals: tuple[DecisionSeal, ...], at: str) -> SaidBy:
        """Take the speaker's words out of every other thread and archived report (see `Quotes`), and
        erase the memories of them (they held nothing else). With a thread busy, the memories stay:
        they are where a second run finds the words again."""
        result = self.quotes.redact(seals, at)
        if not result.busy:
            result.memories = self.memory_store.erase([memory.id for memory in self._memories()])
        return result


def resealer(thread_id: str, seals: tuple[DecisionSeal, ...]) -> Reseal:
    """What keeps the thread's claims true over a redacted dict: a decision that carried a valid seal
    (the gate's or the doors') is sealed again by the same seal; one that did not stays unsealed; a
    pending request is bound to its redacted draft."""

    def reseal(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        if new.get("kind") == "approval_request" and isinstance(new.get("description"), str):
            return _asking_again(new)
        for seal in seals:
            if seal.sealed(thread_id, old) is not None:
                try:
                    decision = Decision.model_validate(new)
                except ValidationError as exc:  # nothing is written: the thread's rewrite stops here
                    raise UserError(
                        f"a decision on thread {thread_id} cannot be redacted ({first_error(exc)}); nothing "
                        "of the thread was changed"
                    ) from None
                return seal.seal(thread_id, decision).model_dump(mode="json")
        return new

    return reseal


def _asking_again(request: dict[str, Any]) -> dict[str, Any]:
    """A pending request whose draft was redacted, bound to the redacted text: approvals counted on
    the old text no longer count (their hash is the old one), so the draft is decided on again."""
    digest = content_hash(request["description"])
    action = request.get("action_request")
    if isinstance(action, dict) and isinstance(action.get("args"), dict):
        args = {**action["args"], "content_hash": digest}
        request = {**request, "action_request": {**action, "args": args}}
    return {**request, "content_hash": digest}
