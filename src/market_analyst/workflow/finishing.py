"""Approved drafts whose publication did not finish are finished by `serve`, not left for a person.

An approval is recorded before the report is published: when a store goes away between the two, or
the process dies, the thread is left `approved_pending_publish`. `resume` (or `approve` again)
finishes it by hand; `serve` also looks for such threads every `MA_PUBLISH_RETRY` (30 s by default)
and finishes each one whose last step is at least that old (a younger one may still be finishing in
the command that approved it), under the thread's lease, as `resume` does. Publishing is exactly
once whoever finishes it: the archive holds one report per approval. A look that meets a store still
away is tried again twice as late each time, up to `BACKOFF_LIMIT` times `MA_PUBLISH_RETRY`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from market_analyst.errors import RunStopped, ServiceUnavailable, ThreadBusy, UserError
from market_analyst.ports import ThreadQuery
from market_analyst.settings import Settings
from market_analyst.workflow.graph_run import open_run
from market_analyst.workflow.runs import resume_thread
from market_analyst.workflow.threads import MAX_LIMIT, checked_threads

_log = logging.getLogger(__name__)

# The rows a look checks against the saved state: an approval whose command died before it wrote
# the thread's row leaves it listed as still waiting, or in progress.
LOOKED_AT = ("approved_pending_publish", "awaiting_approval", "in_progress")
BACKOFF_LIMIT = 10


@dataclass
class Finished:
    """What one look did: the threads it published, those another process held, those it could not."""

    published: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _age(updated_at: str | None, now: datetime) -> timedelta:
    return now - datetime.fromisoformat(updated_at) if updated_at else timedelta.max


def finish_approved(settings: Settings, older_than: timedelta) -> Finished:
    """Publish every approved thread whose publication did not finish and whose last step is at least
    `older_than` old. `ServiceUnavailable` when a store is away (what was published stays published)."""
    with open_run(settings) as run:
        shown, _ = checked_threads(run, ThreadQuery(statuses=LOOKED_AT, limit=MAX_LIMIT))
    now = settings.now()
    due = [
        view.thread_id
        for _, view in shown
        if view is not None
        and view.status == "approved_pending_publish"
        and _age(view.updated_at, now) >= older_than
    ]
    done = Finished()
    for thread_id in due:
        try:
            view = resume_thread(settings, thread_id)
        except ThreadBusy:  # another command, or another replica, is finishing it
            done.busy.append(thread_id)
            continue
        except ServiceUnavailable:
            raise
        except (UserError, RunStopped) as exc:  # it stopped again: said once a look, tried at the next
            _log.warning("thread %s is approved but could not be published: %s", thread_id, exc)
            done.failed.append(thread_id)
            continue
        except Exception:  # a bug: said, and the other threads are still looked at
            _log.exception("publishing approved thread %s failed", thread_id)
            done.failed.append(thread_id)
            continue
        if not view.message.startswith("resumed"):  # another process finished it meanwhile
            continue
        if view.status == "awaiting_approval":  # one approval of several: back at the gate for the next
            continue
        if view.status == "published":
            key = (view.publication or {}).get("key", "")
            _log.info(
                "published thread %s, approved before its publication was cut short: %s", thread_id, key
            )
            done.published.append(thread_id)
        else:
            done.failed.append(thread_id)
    return done


class Finisher:
    """`serve`'s look for approved threads to publish, in a daemon thread of its own: the first look
    one `MA_PUBLISH_RETRY` after start, then one every `MA_PUBLISH_RETRY`, twice as late after each
    look that met a store away or left a thread unpublished."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.every = settings.publish_retry.total_seconds()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="finisher", daemon=True)

    def start(self) -> Finisher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        failed = 0
        while not self._stop.wait(
            min(self.every * 2 ** min(failed, BACKOFF_LIMIT), self.every * BACKOFF_LIMIT)
        ):
            try:
                done = finish_approved(self.settings, self.settings.publish_retry)
            except ServiceUnavailable as exc:
                _log.warning("approved threads wait to be published: %s", exc)
                failed += 1
                continue
            except Exception:  # a bug: said, and the next look tries again
                _log.exception("looking for approved threads to publish failed")
                failed += 1
                continue
            failed = failed + 1 if done.failed else 0
