"""A real SMTP server on loopback (aiosmtpd), keeping every message it takes, in order."""

from __future__ import annotations

import email
import email.policy
import threading
import time
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller

from tests.support.services import free_port


class _Keeper:
    def __init__(self, server: SmtpServer) -> None:
        self.server = server

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.server.lock:
            self.server.messages.append((list(envelope.rcpt_tos), message))  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


class SmtpServer:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []
        self.lock = threading.Lock()
        self.port = free_port()
        self.url = f"smtp://127.0.0.1:{self.port}"
        self._controller = Controller(_Keeper(self), hostname="127.0.0.1", port=self.port)

    def to(self, address: str) -> list[EmailMessage]:
        with self.lock:
            return [m for rcpts, m in self.messages if address in rcpts]

    def wait_for(self, test: Any, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not test(self):
            if time.monotonic() > deadline:
                with self.lock:
                    got = [(r, m["Subject"]) for r, m in self.messages]
                raise AssertionError(f"no such mail within {timeout} s; got: {got}")
            time.sleep(0.1)

    def __enter__(self) -> SmtpServer:
        self._controller.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._controller.stop()
