"""`pipeline.py registry | rollback | serve`, run as a user runs them, on a real local registry."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from llm_pipeline.registry.local.registry import LocalRegistry

from .pipeline_cli import PIPELINE, REPO, run_pipeline

ENDPOINT = "summarizer-endpoint"


def model_folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def two_deploys(tmp_path: Path) -> Path:
    """A registry whose endpoint served version 1, then version 2."""
    registry_dir = tmp_path / "registry"
    registry = LocalRegistry(registry_dir)
    for number, rouge in ((1, 30.25), (2, 31.5)):
        version = registry.register(
            model="summarizer",
            model_dir=str(model_folder(tmp_path, f"run-{number}")),
            metrics={"rougeLsum": rouge, "rouge1": rouge + 8},
            run=f"run-{number}",
        )
        registry.deploy(version, ENDPOINT)
    return registry_dir


def test_registry_lists_versions_metrics_and_what_each_endpoint_serves(
    two_deploys: Path,
) -> None:
    result = run_pipeline("registry", "--registry-dir", str(two_deploys))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "model summarizer"
    assert lines[1].split()[0] == "summarizer@1" and "rougeLsum 30.25" in lines[1]
    assert "rouge1 38.25" in lines[1] and "run run-1" in lines[1]
    assert lines[2].split()[0] == "summarizer@2" and "rougeLsum 31.50" in lines[2]
    assert lines[3] == f"endpoint {ENDPOINT}: serves summarizer@2 (summarizer@2 100%)"


def test_registry_of_an_empty_folder_says_so(tmp_path: Path) -> None:
    result = run_pipeline("registry", "--registry-dir", str(tmp_path / "none"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["No models registered yet.", "No endpoints yet."]


def test_rollback_restores_the_previous_version_and_names_both(two_deploys: Path) -> None:
    result = run_pipeline("rollback", "--endpoint", ENDPOINT, "--registry-dir", str(two_deploys))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"endpoint {ENDPOINT}: rolled back from summarizer@2 to summarizer@1 (now 100% of traffic)"
    )
    record = json.loads((two_deploys / "endpoints" / f"{ENDPOINT}.json").read_text())
    assert record["deployed"] == [{"model": "summarizer", "version": "1", "traffic": 100}]
    assert [entry["action"] for entry in record["history"]][-1] == "rollback"


def test_rollback_of_an_unknown_endpoint_names_the_ones_that_exist(two_deploys: Path) -> None:
    result = run_pipeline("rollback", "--endpoint", "nope", "--registry-dir", str(two_deploys))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "no endpoint named 'nope'" in result.stderr and ENDPOINT in result.stderr


def test_registry_dir_with_a_vertex_config_is_refused(tmp_path: Path) -> None:
    result = run_pipeline(
        "registry",
        "--config",
        str(REPO / "configs" / "local.json"),
        "--set",
        "deploy.target=vertex",
        "--registry-dir",
        str(tmp_path),
    )
    assert result.returncode == 2
    assert "--registry-dir is for a local registry" in result.stderr


@pytest.mark.slow
def test_serve_runs_the_endpoints_version_until_sigterm(
    tmp_path: Path, tiny_model_dir: Path, loopback_port: int
) -> None:
    registry = LocalRegistry(tmp_path / "registry")
    version = registry.register(model="summarizer", model_dir=str(tiny_model_dir), metrics={})
    registry.deploy(version, ENDPOINT)
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            str(PIPELINE),
            "serve",
            "--endpoint",
            ENDPOINT,
            "--registry-dir",
            str(tmp_path / "registry"),
            "--port",
            str(loopback_port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{loopback_port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.5)
        answer = httpx.post(
            f"{url}/predict",
            json={"instances": ["The json module encodes and decodes JSON documents."]},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["predictions"]) == 1
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        log.close()
    assert (
        f"Serving summarizer@1 ({version.uri}) for endpoint {ENDPOINT}"
        in (tmp_path / "serve.log").read_text()
    )


def test_serve_of_an_endpoint_that_serves_nothing_says_so(tmp_path: Path) -> None:
    result = run_pipeline("serve", "--endpoint", ENDPOINT, "--registry-dir", str(tmp_path))
    assert result.returncode == 1
    assert f"endpoint '{ENDPOINT}' serves nothing (endpoints: none)" in result.stderr
