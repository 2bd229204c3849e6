"""llm_pipeline.cli.image_check, each image's last build step, on real parts where they exist here:
the installed DeepSpeed's build record, g++ through containers/portable-g++, readelf on the
libraries it builds, this environment's interpreter and lock."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llm_pipeline.cli import image_check
from llm_pipeline.lockfile import parse_lock

from .dockerfile import CONTAINERS, REPO

WRAPPER = CONTAINERS / "portable-g++"
# Compiles only as DeepSpeed's AVX2 path: the AVX-512 one must not be chosen.
SOURCE = """
#ifdef __AVX512__
#error the AVX-512 path was chosen
#endif
#ifndef __AVX256__
#error the AVX2 path was not chosen
#endif
float scale(float* values, int n) {
    float sum = 0;
    for (int i = 0; i < n; i++) sum += values[i] * 2.0f;
    return sum;
}
"""
needs_toolchain = pytest.mark.skipif(
    not (shutil.which("g++") and shutil.which("readelf") and shutil.which("objcopy")),
    reason="g++, readelf and objcopy (binutils) are needed",
)


def build(tmp_path: Path, compiler: list[str], *flags: str) -> Path:
    """A shared library compiled as DeepSpeed compiles CPU Adam (its flags included)."""
    source = tmp_path / "op.cpp"
    source.write_text(SOURCE)
    library = tmp_path / "op.so"
    subprocess.run(
        [*compiler, "-shared", "-fPIC", "-g", "-O3", *flags, "-o", str(library), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return library


@needs_toolchain
def test_the_wrapper_compiles_deepspeeds_native_flags_for_x86_64_v3(tmp_path: Path) -> None:
    library = build(tmp_path, [str(WRAPPER)], "-march=native", "-D__AVX512__")

    assert image_check.compiled_march(library) == {"x86-64-v3"}
    assert image_check.portable_problems(library) == []


@needs_toolchain
def test_a_library_built_for_the_build_machine_is_refused(tmp_path: Path) -> None:
    """What DeepSpeed builds without the wrapper: GCC records the CPU -march=native found."""
    library = build(tmp_path, ["g++"], "-march=native", "-D__AVX256__")

    (problem,) = image_check.portable_problems(library)
    assert "not x86-64-v3" in problem and "native" not in image_check.compiled_march(library)


@needs_toolchain
def test_a_cuda_op_built_as_plain_cpp_is_refused(tmp_path: Path) -> None:
    library = build(tmp_path, ["g++"], "-D__AVX256__")
    assert image_check.cuda_library_problems(library) != []

    fatbin = tmp_path / "fatbin"
    fatbin.write_bytes(b"\0" * 16)
    subprocess.run(
        ["objcopy", "--add-section", f".nv_fatbin={fatbin}", str(library)],
        check=True,
        timeout=60,
    )
    assert image_check.cuda_library_problems(library) == []


def test_the_installed_deepspeed_here_is_refused_for_the_train_image() -> None:
    """A plain `pip install deepspeed` on a machine without a GPU, as this one (and Cloud Build
    without DS_ACCELERATOR): accelerator 'cpu', no op prebuilt, no CUDA."""
    import torch

    info = image_check.deepspeed_record()
    assert info, "the installed DeepSpeed has no build record"
    problems = image_check.deepspeed_build_problems(
        info, torch.__version__, torch.version.cuda, image_check.TRAIN_OPS
    )

    assert any("'cpu' accelerator" in p or "'' accelerator" in p for p in problems), problems
    assert any(
        "expected exactly ['async_io', 'cpu_adam', 'fused_adam', 'pin_memory']" in p
        for p in problems
    )


def test_deepspeed_built_as_the_train_image_builds_it_passes() -> None:
    """What DeepSpeed's setup.py writes for DS_ACCELERATOR=cuda with the three ops (it records
    a built op as 1 and adds pin_memory for async_io), against torch 2.13 with CUDA 12.6."""
    info = {
        "accelerator_name": "cuda",
        "installed_ops": {"async_io": 1, "cpu_adam": 1, "fused_adam": 1, "pin_memory": 1}
        | {"cpu_adagrad": False, "transformer": False},
        "torch_info": {"version": "2.13", "bf16_support": False, "cuda_version": "12.6"},
    }

    assert (
        image_check.deepspeed_build_problems(info, "2.13.0+cu126", "12.6", image_check.TRAIN_OPS)
        == []
    )
    missing = {**info, "installed_ops": {"cpu_adam": 1, "fused_adam": 1}}
    assert image_check.deepspeed_build_problems(missing, "2.13.0", "12.6", image_check.TRAIN_OPS)


def test_the_python_on_path_must_be_this_environments(tmp_path: Path) -> None:
    here = str(Path(sys.executable).parent)
    other = tmp_path / "bin"
    other.mkdir()
    for name in ("python", "python3"):
        (other / name).symlink_to(sys.executable)

    assert image_check.interpreter_problems({"PATH": f"{here}:{other}"}) == []
    problems = image_check.interpreter_problems({"PATH": str(other)})
    assert any("`python3` on PATH is" in p for p in problems)
    assert any("no `python` on PATH" in p for p in image_check.interpreter_problems({"PATH": ""}))


def test_the_torch_here_is_the_cpu_build_at_the_locked_version() -> None:
    """What the CPU serve image's check asks, and the proof that installing from the lock
    brought no CUDA build here; the GPU images' check refuses it."""
    assert image_check.torch_problems(cuda=False) == []
    assert "is a CPU build" in image_check.torch_problems(cuda=True)[0]


def test_the_serve_image_check_passes_in_an_environment_installed_from_the_lock() -> None:
    """The whole CPU serve check, run as the image runs it (`python3` from the venv's bin/ on
    PATH) on this environment, which `make install` built from the lock as the image does."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["python3", "-m", "llm_pipeline.cli.image_check", "serve", "--lock", "requirements.lock"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "image check (serve): ok" in done.stdout


def test_lock_select_prints_the_named_entries_with_their_hashes(tmp_path: Path) -> None:
    lock = REPO / "requirements.lock"
    done = subprocess.run(
        [str(CONTAINERS / "lock-select"), str(lock), "deepspeed", "ninja"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )

    selected = parse_lock(done.stdout)
    full = parse_lock(lock.read_text())
    assert selected == {name: full[name] for name in ("deepspeed", "ninja")}
    missing = subprocess.run(
        [str(CONTAINERS / "lock-select"), str(lock), "no-such-package"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert missing.returncode == 1 and "no-such-package is not in" in missing.stderr


def test_the_serving_engine_is_checked_in_every_image(monkeypatch: pytest.MonkeyPatch) -> None:
    assert image_check.engine_problems() == []  # installed here from the same lock
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # an image built without it
    assert image_check.engine_problems()[0].startswith("ctranslate2 does not import")
