"""Helpers for tests that start server processes and wait on them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
#: Longest wait for a server to load the tiny model (2 shared cores, torch imports included).
START_TIMEOUT_S = 90.0
#: The shared server answers on routes other than the defaults, as AIP_* variables may say.
HEALTH, PREDICT = "/v1/ping", "/v1/models/summarizer:predict"
LIMITS = {
    "LLM_PIPELINE_SERVE_MAX_INSTANCES": "8",
    "LLM_PIPELINE_SERVE_MAX_TEXT_CHARS": "2000",
    "LLM_PIPELINE_SERVE_MAX_NEW_TOKENS_LIMIT": "32",
    "LLM_PIPELINE_SERVE_NUM_BEAMS_LIMIT": "4",
}
#: The instruction-tuning server: its task and default length, as the deploy step sets them,
#: and sampling limits.
CHAT_NEW_TOKENS = 8
CHAT_LIMITS = {
    "LLM_PIPELINE_SERVE_TASK": "instruction_tuning",
    "LLM_PIPELINE_SERVE_PARAMETERS": f'{{"max_new_tokens": {CHAT_NEW_TOKENS}}}',
    "LLM_PIPELINE_SERVE_TEMPERATURE_LIMIT": "1.5",
    "LLM_PIPELINE_SERVE_STOP_LIMIT": "2",
    "LLM_PIPELINE_SERVE_STOP_CHARS_LIMIT": "32",
}

#: The classifiers' servers: the task, and an input limit short enough to cut test texts.
CLASSIFIER_INPUT_TOKENS = 32
CLASSIFIER_LIMITS = {
    "LLM_PIPELINE_SERVE_TASK": "text_classification",
    "LLM_PIPELINE_SERVE_MAX_INPUT_TOKENS": str(CLASSIFIER_INPUT_TOKENS),
}


@dataclass
class Spawned:
    """A server process started by a test, its output going to a file."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the server did not exit within {timeout_s} s:\n{self.output()[-3000:]}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait(60)


def spawn(args: Sequence[str], *, env: Mapping[str, str] | None, log_path: Path) -> Spawned:
    """`python -m llm_pipeline.cli.serve ARGS` with `env` over this process's environment."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "llm_pipeline.cli.serve", *args],
            # Unbuffered as the serving images run it (containers/serve.Dockerfile).
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    return Spawned(process, log_path)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(condition: Any, *, timeout_s: float, what: str) -> None:
    """Poll `condition()` until it is true; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


@dataclass
class Server:
    """The session's shared server (see conftest.py): its URL, process and health history."""

    url: str
    spawned: Spawned
    health_codes: list[int] = field(default_factory=list)

    def post(self, body: Any, **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + PREDICT, json=body, timeout=60, **kwargs)

    def stats(self) -> dict[str, Any]:
        return dict(httpx.get(self.url + "/stats", timeout=10).json())


@dataclass
class InProcess:
    """A server run in a thread of the test process (`serve_in_thread`), on loopback."""

    url: str
    server: Any  # uvicorn.Server
    settings: Any  # Settings

    @property
    def state(self) -> Any:
        """The app's ServerState: its counts, read directly."""
        return self.server.config.app.state.server

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", int(self.settings.port)

    def raw(self) -> socket.socket:
        """A plain TCP connection to the server, for clients no HTTP library imitates."""
        conn = socket.create_connection(self.address, timeout=10)
        conn.settimeout(10)
        return conn


@contextlib.contextmanager
def serve_in_thread(**settings: Any) -> Iterator[InProcess]:
    """`cli/serve.py::build_server` for `Settings(**settings)` on 127.0.0.1, run in a thread
    (no process to start, no torch to import again); stopped as SIGTERM stops it."""
    from llm_pipeline.cli.serve import build_server
    from llm_pipeline.serve.settings import Settings

    config = Settings(**{"host": "127.0.0.1", "port": free_port(), **settings})
    server = build_server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout_s=30, what="the in-process server to listen")
    try:
        yield InProcess(f"http://127.0.0.1:{config.port}", server, config)
    finally:
        server.should_exit = True
        thread.join(60)
