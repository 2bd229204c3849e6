"""Starting and stopping: SIGTERM drops nothing accepted and waits for no body still
arriving; a model that cannot load ends the process at once with one line saying why;
`start_server` for the deploy step."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from llm_pipeline.errors import ServeError
from llm_pipeline.serve.server_process import start_server
from llm_pipeline.tasks import TASKS

from .conftest import ENGINES
from .servers import free_port, wait_for

#: A load failure must end the process within this (torch and transformers imports included).
EXIT_TIMEOUT_S = 60.0


def test_sigterm_finishes_every_accepted_request_and_not_a_stalled_body(
    tiny_model_dir: Path, documents: list[str], reference: Any, engine: str
) -> None:
    requests = 16
    texts = documents[:requests]
    parameters = {"max_new_tokens": 16, "min_new_tokens": 16}  # every batch takes a while
    expected = reference(texts, **parameters)
    # Two per batch: most requests are still queued when SIGTERM arrives. A body's own
    # deadline far away: only the shutdown can end the stalled one. A shutdown bound far
    # away too (on a busy machine the queue takes longer than the default 20 s).
    env = {
        "LLM_PIPELINE_SERVE_MAX_BATCH_SIZE": "2",
        "LLM_PIPELINE_SERVE_BODY_TIMEOUT_S": "600",
        "LLM_PIPELINE_SERVE_SHUTDOWN_TIMEOUT_S": "300",
        **ENGINES[engine],  # under each engine (`reference` generates with the same one)
    }
    with start_server(tiny_model_dir, env=env, timeout_s=90) as server:
        assert server.predict(texts[:2], parameters) == expected[:2]
        with pytest.raises(ServeError, match=r"answered 400: instances: empty"):
            server.predict([])
        answers: list[Any] = [None] * requests

        def client(i: int) -> None:
            try:
                answers[i] = httpx.post(
                    server.predict_url,
                    json={"instances": [texts[i]], "parameters": parameters},
                    timeout=120,
                )
            except httpx.HTTPError as exc:
                answers[i] = exc

        threads = [threading.Thread(target=client, args=(i,)) for i in range(requests)]
        for thread in threads:
            thread.start()

        def all_accepted(extra: int = 0) -> bool:
            stats = httpx.get(server.url + "/stats").json()
            answered = stats["requests_in_flight"] + stats["requests_answered"]
            return bool(answered == requests + 1 + extra)

        wait_for(all_accepted, timeout_s=30, what="all requests to reach the server")
        # A client stalled mid-body: nothing of its request was accepted.
        stalled = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        stalled.sendall(
            b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"instances": ["stalled'
        )
        wait_for(lambda: all_accepted(extra=1), timeout_s=10, what="the stalled request read")
        in_flight = httpx.get(server.url + "/stats").json()["requests_in_flight"] - 1
        server.process.send_signal(signal.SIGTERM)
        # uvicorn notices the signal within 0.1 s and stops listening; a connection made in
        # that moment may be closed unanswered (uvicorn's race, not this server's), so the
        # connections tried after it must all be refused while the accepted ones finish.
        time.sleep(0.3)
        late: list[Any] = []
        while server.process.poll() is None and len(late) < 200:
            try:
                with httpx.Client(timeout=120) as fresh:
                    late.append(fresh.post(server.predict_url, json={"instances": [texts[0]]}))
            except httpx.ConnectError as exc:
                late.append(exc)
            time.sleep(0.02)
        for thread in threads:
            thread.join(timeout=120)
        code = server.process.wait(60)
        stalled.close()
        log = server.log_path.read_text()

    assert in_flight >= 4, f"only {in_flight} requests were in flight at SIGTERM"
    failed = [a for a in answers if not isinstance(a, httpx.Response)]
    assert not failed, failed
    assert [a.status_code for a in answers] == [200] * requests
    assert [a.json()["predictions"][0] for a in answers] == expected
    assert all(isinstance(answer, httpx.ConnectError) for answer in late), late
    assert code in (0, -signal.SIGTERM), log
    assert "Traceback" not in log and "Finished server process" in log
    assert "the client left mid-body; nothing was run" in log


def _assert_exits_with(spawned: Any, message: str) -> str:
    code = spawned.wait(EXIT_TIMEOUT_S)
    output = spawned.output()
    assert code == 1, output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], output
    assert "Traceback" not in output, output
    return errors[0]


@pytest.mark.parametrize(
    ("weights", "said"),
    [
        (None, ": no such folder"),
        # The weights' file given for their folder: it said "no such folder" of a file.
        (b"weights", " is a file: give the folder that holds config.json and the weights"),
    ],
)
def test_a_model_path_that_is_no_folder_ends_the_server(
    spawned: Any, tmp_path: Path, weights: bytes | None, said: str
) -> None:
    path = tmp_path / "model.safetensors"
    if weights is not None:
        path.write_bytes(weights)
    server = spawned(
        ["--host", "127.0.0.1", "--port", str(free_port())], env={"AIP_STORAGE_URI": str(path)}
    )
    _assert_exits_with(server, f"model folder {path}{said}")


def test_an_unreachable_storage_uri_ends_the_server(spawned: Any, gcs_bucket: str) -> None:
    uri = f"gs://{gcs_bucket}-missing/models/1"  # the emulator answers; the bucket is not there
    server = spawned(
        ["--host", "127.0.0.1", "--port", str(free_port())], env={"AIP_STORAGE_URI": uri}
    )
    _assert_exits_with(server, f"model {uri}: no such folder")


def test_no_model_at_all_is_refused(spawned: Any) -> None:
    server = spawned(
        ["--host", "127.0.0.1", "--port", str(free_port())], env={"AIP_STORAGE_URI": ""}
    )
    _assert_exits_with(server, "no model to serve: pass --model PATH or set AIP_STORAGE_URI")


def test_bad_settings_exit_2_naming_the_variable(spawned: Any, tiny_model_dir: Path) -> None:
    server = spawned(
        ["--model", str(tiny_model_dir)],
        env={
            "LLM_PIPELINE_SERVE_MAX_BATCH_SIZE": "0",
            "AIP_HTTP_PORT": "http",
            "LLM_PIPELINE_SERVE_TASK": "translation",
        },
    )
    assert server.wait(EXIT_TIMEOUT_S) == 2
    output = server.output()
    assert "LLM_PIPELINE_SERVE_MAX_BATCH_SIZE" in output and "AIP_HTTP_PORT" in output
    assert (
        "LLM_PIPELINE_SERVE_TASK: unknown task 'translation'; known tasks: "
        f"{', '.join(sorted(TASKS))}" in output
    )
    assert "Traceback" not in output


def test_a_folder_that_is_not_a_model_fails_start_server_fast(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("notes, no weights")
    started = time.monotonic()
    with (
        pytest.raises(ServeError, match=r"exited with code 1 before it was healthy") as failure,
        start_server(tmp_path, timeout_s=EXIT_TIMEOUT_S),
    ):
        pass
    # The child's own one line, quoted; no traceback.
    message = str(failure.value)
    assert f"error: model folder {tmp_path}: no config.json; expected" in message
    assert "Traceback" not in message
    assert time.monotonic() - started < EXIT_TIMEOUT_S


#: Starts a "server" (argv[1]: a script that only sleeps) for model argv[2], says its pid and
#: waits, as the deploy step does while it checks a version.
_DEPLOY_STEP = """
import sys, time
from llm_pipeline.serve import server_process
sys.executable = sys.argv[1]
def healthy(server, model_dir, timeout_s):
    print(server.process.pid, flush=True)
    time.sleep(600)
server_process._wait_healthy = healthy
with server_process.start_server(sys.argv[2]):
    pass
"""


def test_the_server_dies_with_a_killed_deploy_step(tmp_path: Path) -> None:
    """A deploy step killed with SIGKILL (the OOM killer) while it checked a version left
    the server it started running, the model in memory and the port taken, for good."""
    import os
    import subprocess
    import sys

    import psutil

    sleeper = tmp_path / "python"
    sleeper.write_text("#!/bin/sh\nexec sleep 600\n")
    sleeper.chmod(0o755)
    step = subprocess.Popen(
        [sys.executable, "-c", _DEPLOY_STEP, str(sleeper), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    server: psutil.Process | None = None
    try:
        assert step.stdout is not None
        server = psutil.Process(int(step.stdout.readline()))
        step.kill()
        step.wait()

        def gone() -> bool:
            try:
                return server is None or server.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        wait_for(gone, timeout_s=10, what="the server to die with the deploy step")
    finally:
        step.kill()
        if server is not None and server.is_running():
            server.kill()


def test_a_port_in_use_is_one_line_before_the_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llm_pipeline.cli.serve import main

    with socket.socket() as holder:  # another server's listening socket
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code = main(["--model", str(tmp_path), "--host", "127.0.0.1", "--port", str(port)])
    assert code == 1
    assert capsys.readouterr().err == (
        f"error: cannot listen on 127.0.0.1:{port}: address already in use "
        "(give another with --port)\n"
    )
