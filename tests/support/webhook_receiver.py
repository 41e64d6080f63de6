"""A webhook receiver on loopback, as a careful one is written: it verifies each request's Standard
Webhooks signature with the `standardwebhooks` package (a request that fails is answered 401 and kept
in `forged`), de-duplicates by `webhook-id` (a repeat is answered 200 and counted in `repeats`, never
acted on twice), and keeps every event it took, in the order it took them.

`fail_next(n, status)` makes it answer the next `n` requests with `status` before verifying
anything, as a receiver in an outage would; `fail_always(status)` keeps doing so until `recover()`.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


class WebhookReceiver:
    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.taken: list[dict[str, Any]] = []  # each event once, in the order first taken
        self.seen: Counter[str] = Counter()  # every verified request, by webhook-id
        self.requests: list[tuple[float, str, int]] = []  # (time, webhook-id, status answered)
        self.forged: list[dict[str, str]] = []
        self._failures = 0
        self._delay = 0.0
        self._hold = False
        self._held = threading.Event()
        self._released = threading.Event()
        self._status = 500
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                status = receiver._take(body, {k.lower(): v for k, v in self.headers.items()})
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take(self, body: bytes, headers: dict[str, str]) -> int:
        msg_id = headers.get("webhook-id", "")
        with self._changed:
            if self._failures:
                self._failures -= 1
                self.requests.append((time.monotonic(), msg_id, self._status))
                return self._status
        try:
            event = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            with self._changed:
                self.forged.append(headers)
                self.requests.append((time.monotonic(), msg_id, 401))
            return 401
        with self._changed:
            self.seen[msg_id] += 1
            self.requests.append((time.monotonic(), msg_id, 200))
            if self.seen[msg_id] == 1:
                self.taken.append({"id": msg_id, **event})
            self._changed.notify_all()
            hold, self._hold = self._hold, False
            delay = self._delay
        if hold:  # taken: now wait, as a receiver whose answer is slow, while the sender is killed
            self._held.set()
            self._released.wait(60)
        if delay:
            time.sleep(delay)
        return 200

    @property
    def repeats(self) -> int:
        with self._lock:
            return sum(n - 1 for n in self.seen.values())

    def fail_next(self, count: int, status: int = 500) -> None:
        with self._lock:
            self._failures, self._status = count, status

    def fail_always(self, status: int = 500) -> None:
        self.fail_next(10**9, status)

    def recover(self) -> None:
        self.fail_next(0)

    def hold_next(self) -> None:
        """Take the next event, then keep its answer until `release()`."""
        with self._lock:
            self._hold = True

    def wait_until_held(self, timeout: float = 30.0) -> None:
        assert self._held.wait(timeout), f"no event arrived to hold; requests: {self.requests}"

    def release(self) -> None:
        self._released.set()

    def slow_down(self, seconds: float) -> None:
        """Answer each taken event `seconds` late (a worker killed then dies mid-delivery)."""
        with self._lock:
            self._delay = seconds

    def of_thread(self, thread_id: str) -> list[str]:
        """The kinds of the events taken for one thread, in the order taken."""
        with self._lock:
            return [e["data"]["action"] for e in self.taken if e["data"]["thread_id"] == thread_id]

    def wait_for(self, test: Any, timeout: float = 30.0, what: str = "events") -> None:
        """Wait until `test(self)` is true; AssertionError naming what was taken otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not test(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    taken = [(e["data"]["thread_id"], e["data"]["action"]) for e in self.taken]
                    raise AssertionError(
                        f"no {what} within {timeout} s; taken: {taken}; requests: {self.requests[-10:]}"
                    )
                self._changed.wait(min(left, 0.2))

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()


def event_json(event: dict[str, Any]) -> str:
    return json.dumps(event, sort_keys=True)
