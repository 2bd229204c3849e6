"""Connections under careless or hostile clients: how many may be open, and how long a
request's head and body may take to arrive, on top of uvicorn's HTTP/1.1 protocol (h11).

uvicorn bounds none of it. A connection that sends nothing, half a request head or half a
body stays open for as long as its client likes, and each holds a socket: file descriptors
run out long before memory does. Its `limit_concurrency` answers 503 only once a request
head has arrived, so idle connections pile up beneath it; and its graceful shutdown waits
for every request not yet answered, one stalled mid-body included, although nothing of
that request was accepted as work.

`guarded_protocol` makes the protocol class uvicorn runs (`uvicorn.Config(http=...)`):

* a connection past `max_connections` is answered 503 and closed as it opens;
* a request head not whole `header_timeout_s` after the connection opened (or after the
  previous answer on it) gets a 408 and the connection is closed; trickling bytes does not
  restart the clock;
* a body not whole `body_timeout_s` after its head likewise: the route reading it hears
  that the client is gone (`BODY_TIMED_OUT` in the request's scope says why);
* on shutdown, a connection whose request body is still arriving is closed at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("llm_pipeline.serve")

#: Set in a request's ASGI scope when its body timed out (the route then logs nothing more).
BODY_TIMED_OUT = "llm_pipeline.body_timed_out"
#: Seconds between two log lines about refused connections (a flood would fill the log).
_WARN_EVERY_S = 10.0


@dataclass(frozen=True)
class ConnectionLimits:
    """How many connections, and how long a request head and body may take."""

    max_connections: int
    header_timeout_s: float
    body_timeout_s: float


@dataclass
class ConnectionCounts:
    """What the limits did so far, for `/stats`."""

    open: int = 0
    refused: int = 0
    header_timeouts: int = 0
    body_timeouts: int = 0
    _warned_at: float = float("-inf")


def guarded_protocol(limits: ConnectionLimits, counts: ConnectionCounts) -> type[H11Protocol]:
    """uvicorn's h11 protocol with `limits`, counting into `counts`."""
    return type("GuardedProtocol", (_Guarded,), {"limits": limits, "counts": counts})


class _Guarded(H11Protocol):
    """H11Protocol with a connection limit and request deadlines (see the module)."""

    limits: ClassVar[ConnectionLimits]
    counts: ClassVar[ConnectionCounts]
    _deadline: asyncio.TimerHandle | None = None
    _phase: str | None = None  # "head" or "body": what the client owes and the timer awaits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.counts.open += 1
        if len(self.connections) > self.limits.max_connections:
            self._refuse()
        else:
            self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.counts.open -= 1
        self._disarm()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """Close a connection whose body is still arriving; the rest as uvicorn does."""
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._disarm()
            self.transport.close()
        else:
            super().shutdown()

    def _refuse(self) -> None:
        counts = self.counts
        counts.refused += 1
        now = time.monotonic()
        if now - counts._warned_at >= _WARN_EVERY_S:
            counts._warned_at = now
            logger.warning(
                "refused a connection: %d are open, the limit (LLM_PIPELINE_SERVE_"
                "MAX_CONNECTIONS); %d refused so far",
                self.limits.max_connections,
                counts.refused,
            )
        message = f"too many connections (the limit is {self.limits.max_connections}); retry"
        self._answer_and_close(503, "Service Unavailable", message, retry_after=1)

    def _arm(self) -> None:
        """Start the deadline for what the client owes now, unless it is already running."""
        state = self.conn.their_state
        phase = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase == self._phase or self.transport.is_closing():
            return
        self._disarm()
        self._phase = phase
        if phase is not None:
            limits = self.limits
            seconds = limits.header_timeout_s if phase == "head" else limits.body_timeout_s
            self._deadline = self.loop.call_later(seconds, self._expire, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._phase = None, None

    def _expire(self, phase: str) -> None:
        self._deadline, self._phase = None, None
        if self.transport.is_closing():
            return
        if phase == "head":
            self.counts.header_timeouts += 1
            seconds = self.limits.header_timeout_s
            message = f"no whole request head within {seconds:g} s"
        else:
            self.counts.body_timeouts += 1
            seconds = self.limits.body_timeout_s
            message = f"request body not whole within {seconds:g} s"
            self.scope[BODY_TIMED_OUT] = True  # type: ignore[literal-required]
            client = "{}:{}".format(*self.client) if self.client else "a client"
            logger.info(
                "%s %s from %s: %s", self.scope["method"], self.scope["path"], client, message
            )
            if self.cycle is not None and self.cycle.response_started:
                self.transport.close()  # answered already (a refusal before the body was read)
                return
        self._answer_and_close(408, "Request Timeout", message)

    def _answer_and_close(
        self, status: int, reason: str, message: str, *, retry_after: int | None = None
    ) -> None:
        """Write a whole JSON answer and close: no request was read to answer with h11."""
        body = json.dumps({"error": message}).encode()
        head = [
            f"HTTP/1.1 {status} {reason}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            "connection: close",
        ]
        if retry_after is not None:
            head.append(f"retry-after: {retry_after}")
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        self.transport.close()
