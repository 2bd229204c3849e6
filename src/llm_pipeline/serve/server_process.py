"""Run the prediction server as a child process on loopback, for as long as a `with` block.

The deploy step checks a new model version this way before traffic moves to it, and tests
and benchmarks use it to talk to the real server. The child is the real command
(`python -m llm_pipeline.cli.serve`), so what is checked is what the container runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from llm_pipeline.errors import ServeError
from llm_pipeline.launch.lifetime import dies_with_this_process
from llm_pipeline.serve.settings import load_settings

__all__ = ["RunningServer", "start_server", "stop_server"]

#: Lines of the child's output quoted when it fails to start.
_TAIL_LINES = 12


@dataclass
class RunningServer:
    """A started server: its base URL, routes, and process."""

    url: str
    health_url: str
    predict_url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    #: The server's bearer token (LLM_PIPELINE_SERVE_TOKEN in its environment), sent with
    #: every prediction.
    token: str | None = None

    def predict(
        self,
        instances: Sequence[str | Mapping[str, Any]],
        parameters: Mapping[str, Any] | None = None,
        *,
        timeout_s: float = 300.0,
    ) -> list[Any]:
        """The server's predictions for `instances`, as it answered them (JSON values: texts,
        or a classifier's labels with scores); raises ServeError with its message."""
        body: dict[str, Any] = {"instances": list(instances)}
        if parameters is not None:
            body["parameters"] = dict(parameters)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = httpx.post(self.predict_url, json=body, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise ServeError(f"POST {self.predict_url} failed: {exc}") from None
        if response.status_code != 200:
            raise ServeError(
                f"POST {self.predict_url} answered {response.status_code}: {_error_of(response)}"
            )
        predictions = response.json().get("predictions")
        if not isinstance(predictions, list):
            raise ServeError(f"POST {self.predict_url}: no predictions list in {response.text!r}")
        return predictions

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last lines the server wrote (stdout and stderr)."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def start_server(
    model_dir: str | os.PathLike[str],
    *,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
    grace_s: float = 30.0,
    extra_args: Sequence[str] = (),
) -> Iterator[RunningServer]:
    """Start `python -m llm_pipeline.cli.serve --model model_dir` on 127.0.0.1; yield it healthy.

    `env` is laid over this process's environment (routes and limits, as the deploy step
    stores them with a version). Waits up to `timeout_s` for the health route to answer 200
    and raises ServeError, quoting the server's last output lines, if the process exits or
    the time passes first. On leaving the block the server gets SIGTERM (it finishes what
    is in flight) and SIGKILL if it is still running `grace_s` later; if this process dies
    without leaving it (SIGKILL, the OOM killer), the kernel sends the server SIGTERM
    (`dies_with_this_process`: call this from the thread that lives as long as the block).
    """
    child_env = {**os.environ, **(env or {})}
    settings = load_settings(child_env)  # the routes the child will answer on
    port = port or _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        *("-m", "llm_pipeline.cli.serve", "--model", os.fspath(model_dir)),
        *("--host", "127.0.0.1", "--port", str(port), *extra_args),
    ]
    with tempfile.TemporaryDirectory(prefix="llm-pipeline-serve-log-") as logs:
        log_path = Path(logs) / "server.log"
        # A file, not a pipe: nobody reads a pipe while the server runs, and a full one
        # would block the server mid-log.
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                env=child_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=dies_with_this_process(),
            )
        server = RunningServer(
            url=url,
            health_url=url + settings.health_route,
            predict_url=url + settings.predict_route,
            process=process,
            log_path=log_path,
            token=settings.token.get_secret_value() if settings.token is not None else None,
        )
        try:
            _wait_healthy(server, model_dir, timeout_s)
            yield server
        finally:
            stop_server(process, grace_s=grace_s)


def stop_server(process: subprocess.Popen[Any], *, grace_s: float = 30.0) -> int:
    """SIGTERM, then SIGKILL after `grace_s`; the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def _wait_healthy(server: RunningServer, model_dir: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5.0) as client:
        while True:
            code = server.process.poll()
            if code is not None:
                raise ServeError(
                    f"prediction server for {model_dir} exited with code {code} before it was "
                    f"healthy; its last lines:\n{server.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if client.get(server.health_url).status_code == 200:
                    return
            if time.monotonic() > deadline:
                stop_server(server.process, grace_s=5.0)
                raise ServeError(
                    f"prediction server for {model_dir} was not healthy within {timeout_s:g} s "
                    f"({server.health_url}); its last lines:\n{server.log_tail()}"
                )
            time.sleep(0.2)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _error_of(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    return str(body.get("error", body)) if isinstance(body, dict) else str(body)[:500]
