"""Load the server sheds: inputs of clients that left never reach the model, a full queue
and too many requests in flight are answered 503 with `Retry-After`.

The server is the real one on loopback with a real (tiny) causal LM; only its model call is
held at a gate (the batcher's `run`), so that what waits while the model is busy is decided
by the test rather than by how fast this machine generates.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .servers import InProcess, serve_in_thread, wait_for

QUEUE, IN_FLIGHT = 8, 6


@pytest.fixture(scope="module")
def gated(causal_lm_dir: Path) -> Iterator[tuple[InProcess, threading.Event]]:
    """The instruction-tuning server and the gate its model calls wait at (open = run)."""
    with serve_in_thread(
        model_uri=str(causal_lm_dir),
        task="instruction_tuning",
        max_batch_size=4,
        max_queued_instances=QUEUE,
        max_requests_in_flight=IN_FLIGHT,
        parameters={"max_new_tokens": 2},
    ) as running:
        wait_for(lambda: running.state.ready, timeout_s=90, what="the model to load")
        gate = threading.Event()
        batcher = running.state.batcher
        model_call = batcher._run

        def at_the_gate(key: Any, inputs: list[Any]) -> Any:
            assert gate.wait(60), "the test never opened the gate"
            return model_call(key, inputs)

        batcher._run = at_the_gate
        yield running, gate
        gate.set()


def _stats(server: InProcess) -> dict[str, Any]:
    return dict(httpx.get(server.url + "/stats", timeout=10).json())


def _post_in_thread(server: InProcess, instances: list[str], into: list[Any]) -> threading.Thread:
    url = server.url + server.settings.predict_route

    def post() -> None:
        into.append(httpx.post(url, json={"instances": instances}, timeout=60))

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def _send_and_leave(server: InProcess, instances: list[str]) -> None:
    """A whole request, then the connection closed without reading the answer."""
    body = json.dumps({"instances": instances}).encode()
    head = (
        f"POST {server.settings.predict_route} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(server.address) as conn:
        conn.sendall(head + body)


def test_inputs_of_clients_that_left_never_reach_the_model(
    gated: tuple[InProcess, threading.Event], caplog: pytest.LogCaptureFixture
) -> None:
    server, gate = gated
    gate.clear()
    before = _stats(server)
    answers: list[Any] = []
    blocker = _post_in_thread(server, ["hold the model"], answers)
    wait_for(
        lambda: _stats(server)["model_calls"] == before["model_calls"] + 1,
        timeout_s=10,
        what="the first call to start",
    )
    clients = 4
    with caplog.at_level(logging.INFO, logger="llm_pipeline.serve"):
        for i in range(clients):
            _send_and_leave(server, [f"gone {i} a", f"gone {i} b"])
        wait_for(
            lambda: _stats(server)["requests_abandoned"] == before["requests_abandoned"] + clients,
            timeout_s=10,
            what="the server to see every client leave",
        )
        left = _stats(server)
        gate.set()
        blocker.join(60)
    after = _stats(server)
    assert [a.status_code for a in answers] == [200]
    assert left["instances_queued"] == 0  # they left the queue as their clients left
    assert after["instances_cancelled"] - before["instances_cancelled"] == 2 * clients
    assert after["instances_run"] - before["instances_run"] == 1  # the blocker's alone
    lines = [r.getMessage() for r in caplog.records if "left before its answer" in r.getMessage()]
    assert len(lines) == clients and all(
        line.endswith("the client left before its answer; 2 of its 2 instances unrun")
        for line in lines
    ), lines


def test_a_full_queue_and_too_many_requests_in_flight_get_503(
    gated: tuple[InProcess, threading.Event],
) -> None:
    server, gate = gated
    gate.clear()
    url = server.url + server.settings.predict_route
    answers: list[Any] = []
    threads = [_post_in_thread(server, ["hold the model"], answers)]
    wait_for(
        lambda: (
            _stats(server)["instances_queued"] == 0 and _stats(server)["requests_in_flight"] == 1
        ),
        timeout_s=10,
        what="the first call to start",
    )
    threads += [_post_in_thread(server, [f"q{i}{j}" for j in range(4)], answers) for i in (0, 1)]
    wait_for(lambda: _stats(server)["instances_queued"] == QUEUE, timeout_s=10, what="a full queue")

    full = httpx.post(url, json={"instances": ["one more"]}, timeout=10)
    assert full.status_code == 503 and int(full.headers["retry-after"]) >= 1
    assert full.json()["error"].startswith(
        f"the server is busy: {QUEUE} instances are waiting for the model (the limit is {QUEUE})"
    )
    # Requests still sending their bodies count as in flight: three more reach the limit.
    reading = [socket.create_connection(server.address) for _ in range(IN_FLIGHT - 3)]
    for conn in reading:
        conn.sendall(
            f"POST {server.settings.predict_route} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode()
        )
    wait_for(
        lambda: _stats(server)["requests_in_flight"] == IN_FLIGHT,
        timeout_s=10,
        what="the limit of requests in flight",
    )
    busy = httpx.post(url, json={"instances": ["one more"]}, timeout=10)
    assert busy.status_code == 503 and int(busy.headers["retry-after"]) >= 1
    assert busy.json()["error"].startswith(
        f"the server is busy: {IN_FLIGHT} requests are in flight (the limit is {IN_FLIGHT})"
    )
    for conn in reading:
        conn.close()
    gate.set()
    for thread in threads:
        thread.join(60)
    assert sorted(a.status_code for a in answers) == [200, 200, 200]
    assert _stats(server)["requests_refused_busy"] >= 2
