"""Connections that take too long to send a request are dropped: uvicorn bounds the idle time
between requests (keep-alive) but not how slowly the headers or the body of one may arrive, so a
few clients sending a byte a second could hold the server's connections for ever."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("uvicorn.error")


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with one more rule: a request (headers and body) must arrive whole
    within `request_timeout` seconds of the connection opening or the previous response ending."""

    request_timeout = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout, self._expire)

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            assert self._deadline is not None
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):  # headers or body still on their way
            client = self.client[0] if self.client else "-"
            log.info("%s dropped: the request did not arrive within %g s", client, self.request_timeout)
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is h11.DONE:
            self._disarm()  # the whole request is in: the app takes the time it needs

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            if self.conn.their_state is h11.SEND_BODY:
                self.transport.close()  # answered before the body was read (413): never read it
            else:
                self._arm()  # the next request on this connection gets the same time

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def bounded_protocol(timeout: float) -> Any:
    """The protocol class for `uvicorn.run(http=...)`, with `timeout` seconds per request."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"request_timeout": timeout})
