"""Slow and vanishing clients: a connection limit, deadlines for a request's head and body,
and one log line for a client that leaves mid-body. (A SIGTERM that a stalled body cannot
hold up: test_lifecycle.py.)"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from .servers import InProcess, serve_in_thread, wait_for

LIMIT = 4
TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    """A server with a small connection limit and short deadlines; no model is needed for
    any of this (its folder is missing: the routes read bodies before they ask for it)."""
    missing = tmp_path_factory.mktemp("slow") / "no-model"
    with serve_in_thread(
        model_uri=str(missing),
        max_connections=LIMIT,
        header_timeout_s=TIMEOUT_S,
        body_timeout_s=TIMEOUT_S,
    ) as running:
        # Its one line about the load is logged before any test reads the log.
        wait_for(lambda: running.state.error is not None, timeout_s=30, what="the load to fail")
        yield running


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _post_head(server: InProcess, length: int) -> bytes:
    route = server.settings.predict_route
    return (
        f"POST {route} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _counts(server: InProcess) -> dict[str, int]:
    return dict(httpx.get(server.url + "/stats", timeout=10).json()["connections"])


def test_connections_past_the_limit_are_refused_and_idle_ones_time_out(
    guarded: InProcess,
) -> None:
    before = _counts(guarded)
    idle = [guarded.raw() for _ in range(LIMIT)]
    wait_for(lambda: guarded.state.connections.open == LIMIT, timeout_s=5, what="connections")
    extra = guarded.raw()  # one past the limit: answered and closed at once
    started = time.monotonic()
    refused = _read_all(extra)
    assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), refused
    assert b"retry-after: 1" in refused and b"too many connections (the limit is 4)" in refused
    assert time.monotonic() - started < TIMEOUT_S
    # The idle ones (one with half a request head) get a 408 at the head deadline, however
    # they trickle: the clock does not restart on every byte.
    idle[0].sendall(b"GET / HT")
    time.sleep(TIMEOUT_S / 2)
    idle[0].sendall(b"TP/1.1\r\n")
    for conn in idle:
        answer = _read_all(conn)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        assert b"no whole request head within 0.5 s" in answer
    assert time.monotonic() - started < 3 * TIMEOUT_S + 1
    after = _counts(guarded)
    assert after["refused"] - before["refused"] == 1
    assert after["header_timeouts"] - before["header_timeouts"] == LIMIT


def test_a_stalled_body_times_out_with_one_log_line(
    guarded: InProcess, caplog: pytest.LogCaptureFixture
) -> None:
    before = _counts(guarded)
    with caplog.at_level(logging.INFO), guarded.raw() as conn:
        conn.sendall(_post_head(guarded, 1000) + b'{"instances": ["half')
        answer = _read_all(conn)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
    assert b"request body not whole within 0.5 s" in answer
    assert _counts(guarded)["body_timeouts"] - before["body_timeouts"] == 1
    wait_for(lambda: "not whole" in caplog.text, timeout_s=5, what="the log line")
    time.sleep(0.2)  # anything the route would add comes now
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("llm_pipeline")]
    assert len(lines) == 1 and "request body not whole within 0.5 s" in lines[0], lines
    assert "Traceback" not in caplog.text and "Exception" not in caplog.text


def test_a_client_leaving_mid_body_is_one_line_not_a_500(
    guarded: InProcess, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        with guarded.raw() as conn:
            conn.sendall(_post_head(guarded, 1000) + b'{"instances": ["half')
            time.sleep(0.1)  # the route is reading the body
        wait_for(lambda: "left mid-body" in caplog.text, timeout_s=5, what="the log line")
        time.sleep(0.2)
    records = [r for r in caplog.records if r.name.startswith(("llm_pipeline", "uvicorn"))]
    assert [r.levelname for r in records] == ["INFO"], [r.getMessage() for r in records]
    assert records[0].getMessage().endswith("the client left mid-body; nothing was run")
    assert not any(r.exc_info for r in caplog.records) and "500" not in caplog.text
