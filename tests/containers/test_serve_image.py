"""The serve image's command, as the image runs it, serving what a Vertex training job wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from llm_pipeline.registry.vertex.registry import HEALTH_ROUTE, PREDICT_ROUTE

from .dockerfile import CONTAINERS, as_here, exec_form, healthcheck_command, image_command
from .job import VertexJob

SERVE = CONTAINERS / "serve.Dockerfile"
START_TIMEOUT_S = 90.0


def healthcheck(env: dict[str, str]) -> int:
    """The image's HEALTHCHECK command, run as Docker runs it inside the container."""
    return subprocess.run(
        as_here(healthcheck_command(SERVE)), env=env, capture_output=True, timeout=30, check=False
    ).returncode


@pytest.mark.slow
def test_the_image_serves_a_model_from_aip_storage_uri(
    vertex_job: VertexJob, loopback_port: int, tmp_path: Path
) -> None:
    assert vertex_job.result.returncode == 0, vertex_job.result.stderr[-4000:]
    port = loopback_port
    # What Vertex sets for a model version the deploy step registered (registry/vertex/registry.py).
    env = {
        **os.environ,
        "AIP_STORAGE_URI": vertex_job.model_dir,
        "AIP_HTTP_PORT": str(port),
        "AIP_HEALTH_ROUTE": HEALTH_ROUTE,
        "AIP_PREDICT_ROUTE": PREDICT_ROUTE,
    }
    command = [*image_command("serve.Dockerfile"), *exec_form(SERVE, "CMD")]
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url + HEALTH_ROUTE):
            assert server.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no health 200:\n" + log.read_text()[-3000:]
            time.sleep(0.2)

        assert healthcheck(env) == 0
        reply = httpx.post(
            url + PREDICT_ROUTE,
            json={"instances": ["The first text.", "And the second one."]},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        predictions = reply.json()["predictions"]
        assert len(predictions) == 2
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(60)
    # A clean shutdown; uvicorn then re-raises the SIGTERM it handled.
    assert code in (0, -signal.SIGTERM), log.read_text()[-3000:]


def test_the_healthcheck_fails_where_nothing_answers(loopback_port: int) -> None:
    env = {**os.environ, "AIP_HTTP_PORT": str(loopback_port)}

    assert healthcheck(env) != 0


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False
