"""The last build step of every image: fail the build unless the image is what it claims.

    python3 -m llm_pipeline.cli.image_check {train,serve,serve-cuda} --lock requirements.lock

Run with the `python3` that KFP's compiled commands call (`python3 -m kfp.dsl.executor_main`),
so that interpreter is checked too. What is checked, each a line of its own when it fails:

* the interpreter: `python` and `python3` on PATH are this one, a virtual environment's;
* torch: the version the lock was resolved with, a CUDA build in the GPU images and the CPU
  build in the CPU serve image;
* the lock: every package at its locked version, nothing unlocked beside torch's own, and
  every requirement of the package and its extras met (`pip check`, limited to this package);
* train only: DeepSpeed's build record (`deepspeed.git_version_info`) says the cuda
  accelerator, exactly the ops named, and this torch; fused Adam holds GPU code; CPU Adam and
  async I/O are compiled for the portable CPU target, not the build machine's CPU.
Exit codes: 0 all true, 1 something is not (printed), 2 a wrong command line.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import runpy
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llm_pipeline.lockfile import (
    TORCH_VERSION,
    installed_versions,
    lock_mismatches,
    read_lock,
    unsatisfied_requirements,
)

#: What each image holds of the package (setup.py's extras).
IMAGE_EXTRAS = {"train": ("gcp", "aws", "cuda"), "serve": ("serving",), "serve-cuda": ("serving",)}
#: DeepSpeed's ops the train image prebuilds (llm_pipeline.train.deepspeed_config uses them):
#: CPU Adam for optimizer offload, async I/O for NVMe offload (with pin_memory, which DeepSpeed
#: builds beside it), fused Adam for a user's DeepSpeed JSON with Adam on the GPU.
TRAIN_OPS = ("async_io", "cpu_adam", "fused_adam", "pin_memory")
#: The CPU the ops run on is not the build machine's: every CPU under Vertex AI's GPU machines
#: (N1 on Haswell and later, A2 and G2 on Cascade Lake, A3 on Sapphire Rapids) has AVX2 and
#: FMA, which is x86-64-v3; AVX-512 is not on all of them.
PORTABLE_MARCH = "x86-64-v3"
#: Distributions a venv holds beside the lock: its installer and this package itself.
INSTALLER_PACKAGES = ("pip", "llm-pipeline")


def interpreter_problems(environ: Mapping[str, str] | None = None) -> list[str]:
    """`python` and `python3` on PATH must be this interpreter, from a virtual environment."""
    problems = []
    if sys.prefix == sys.base_prefix:
        problems.append(f"{sys.executable} is not a virtual environment's interpreter")
    path = (environ if environ is not None else os.environ).get("PATH", "")
    here = Path(sys.executable).parent
    for name in ("python", "python3"):
        found = shutil.which(name, path=path)
        if found is None:
            problems.append(f"no `{name}` on PATH ({path})")
        elif Path(found).parent != here:
            problems.append(f"`{name}` on PATH is {found}, not this environment's ({here})")
    return problems


def torch_problems(*, cuda: bool, version: str = TORCH_VERSION) -> list[str]:
    """torch at `version` (any local build tag), built for CUDA or for the CPU as asked."""
    try:
        import torch
    except ImportError as exc:
        return [f"torch does not import: {exc}"]
    problems = []
    if torch.__version__.split("+")[0] != version:
        problems.append(f"torch {torch.__version__} is installed, {version} is expected")
    built_for = torch.version.cuda
    if cuda and built_for is None:
        problems.append(f"torch {torch.__version__} is a CPU build; this image needs CUDA")
    if not cuda and built_for is not None:
        problems.append(f"torch {torch.__version__} is built for CUDA {built_for}; expected CPU")
    return problems


def lock_problems(lock: Path, extras: Sequence[str]) -> list[str]:
    """The installed packages against the lock (only the venv's own count as extra: a GPU
    image's base has its own), and the package's requirements met."""
    installed = installed_versions()
    paths = sysconfig.get_paths()
    here = installed_versions(sorted({paths["purelib"], paths["platlib"]}))
    mismatches = lock_mismatches(
        read_lock(lock), installed, installed_here=here, allowed_extra=INSTALLER_PACKAGES
    )
    return mismatches + unsatisfied_requirements("llm-pipeline", extras, installed)


def deepspeed_build_problems(
    info: Mapping[str, Any], torch_version: str, torch_cuda: str | None, ops: Sequence[str]
) -> list[str]:
    """What `deepspeed.git_version_info` (`info`) says against the wanted build.

    DeepSpeed's OpBuilder.load uses a prebuilt op only when `installed_ops` has it and
    `accelerator_name` is the accelerator it runs on; otherwise it JIT-compiles the op on every
    node at every start. setup.py records ops as `1` when built, `False` when not.
    """
    problems = []
    accelerator = info.get("accelerator_name")
    if accelerator != "cuda":
        problems.append(
            f"DeepSpeed's ops were built for the {accelerator!r} accelerator, not 'cuda' "
            "(build with DS_ACCELERATOR=cuda: a machine without a GPU detects 'cpu')"
        )
    built = sorted(name for name, on in dict(info.get("installed_ops", {})).items() if on)
    if built != sorted(ops):
        problems.append(
            f"DeepSpeed prebuilt {built or 'no ops'}, expected exactly {sorted(ops)} "
            "(an op whose requirements are missing, such as libaio-dev, is skipped silently)"
        )
    torch_info = dict(info.get("torch_info", {}))
    major_minor = ".".join(torch_version.split("+")[0].split(".")[:2])
    if torch_info.get("version") != major_minor:
        problems.append(
            f"DeepSpeed was built with torch {torch_info.get('version')}, not {major_minor}"
        )
    cuda = ".".join(torch_cuda.split(".")[:2]) if torch_cuda else "none (a CPU build of torch)"
    if torch_info.get("cuda_version") != cuda:
        problems.append(
            f"DeepSpeed was built with CUDA {torch_info.get('cuda_version')}, torch has {cuda}"
        )
    return problems


#: What DeepSpeed's setup.py records about its build (deepspeed/git_version_info_installed.py).
DEEPSPEED_FIELDS = ("accelerator_name", "installed_ops", "torch_info")
#: The library each prebuilt op is, and what it is compiled from: C++ that DeepSpeed builds
#: for the build machine's CPU (`-march=native`), or CUDA.
OP_LIBRARIES = {
    "async_io": ("deepspeed.ops.aio.async_io_op", "cpu"),
    "cpu_adam": ("deepspeed.ops.adam.cpu_adam_op", "cpu"),
    "fused_adam": ("deepspeed.ops.adam.fused_adam_op", "cuda"),
    "pin_memory": ("deepspeed.ops.pin_memory.pin_memory_op", ""),
}


def _readelf(*args: str) -> str:
    return subprocess.run(["readelf", *args], capture_output=True, text=True, check=True).stdout


def compiled_march(library: Path) -> set[str]:
    """The `-march` each C++ unit of `library` was compiled with, from its DWARF producer
    strings (GCC records the target there, `-march=native` already resolved to a CPU)."""
    found = set()
    for line in _readelf("--debug-dump=info", "--dwarf-depth=1", str(library)).splitlines():
        if "DW_AT_producer" in line and "GNU C++" in line:
            marches = re.findall(r"-march=(\S+)", line)
            found.add(marches[-1] if marches else "(none)")
    return found


def portable_problems(library: Path, target: str = PORTABLE_MARCH) -> list[str]:
    """`library` must be compiled for `target` only (so no AVX-512 on a CPU without it)."""
    found = compiled_march(library)
    if found != {target}:
        return [f"{library.name} is compiled for {sorted(found) or 'unknown CPUs'}, not {target}"]
    return []


def cuda_library_problems(library: Path) -> list[str]:
    """`library` must hold GPU code (a `.nv_fatbin` section): DeepSpeed builds a CUDA op as
    plain C++ when nvcc's CUDA does not match torch's, and still records it as built."""
    if ".nv_fatbin" not in _readelf("--section-headers", "--wide", str(library)):
        return [f"{library.name} holds no GPU code (no .nv_fatbin section): built for the CPU"]
    return []


def op_library_problems(ops: Sequence[str]) -> list[str]:
    """Each prebuilt op's library: present, and built for what it runs on."""
    problems = []
    for op in ops:
        module, kind = OP_LIBRARIES.get(op, (f"(unknown op {op})", ""))
        spec = importlib.util.find_spec(module) if op in OP_LIBRARIES else None
        if spec is None or spec.origin is None:
            problems.append(f"DeepSpeed's {op} library ({module}) is missing")
        elif kind == "cpu":
            problems += portable_problems(Path(spec.origin))
        elif kind == "cuda":
            problems += cuda_library_problems(Path(spec.origin))
    return problems


def deepspeed_record() -> dict[str, Any]:
    """What `deepspeed.git_version_info` reports: the file DeepSpeed's setup.py wrote at
    install (read without importing DeepSpeed, which would probe for an accelerator); empty
    when there is none, as for a source checkout."""
    spec = importlib.util.find_spec("deepspeed")
    folders = list(spec.submodule_search_locations or []) if spec else []
    record = Path(folders[0]) / "git_version_info_installed.py" if folders else None
    if record is None or not record.is_file():
        return {}
    values = runpy.run_path(str(record))
    return {name: values.get(name) for name in DEEPSPEED_FIELDS}


def deepspeed_problems(ops: Sequence[str]) -> list[str]:
    """The installed DeepSpeed's build record, and its prebuilt libraries."""
    import torch

    info = deepspeed_record()
    if not info:
        return ["DeepSpeed has no build record (deepspeed/git_version_info_installed.py)"]
    problems = deepspeed_build_problems(info, torch.__version__, torch.version.cuda, ops)
    return problems + op_library_problems(ops)


def engine_problems() -> list[str]:
    """The serving engine every image generates with (the evaluate step in the train image,
    the server in the serve images): CTranslate2 imports and runs int8 on the CPU."""
    try:
        import ctranslate2
    except ImportError as exc:
        return [f"ctranslate2 does not import: {exc}"]
    supported = ctranslate2.get_supported_compute_types("cpu")
    if "int8" not in supported:
        return [f"ctranslate2 {ctranslate2.__version__} has no int8 on this CPU: {supported}"]
    return []


def image_problems(image: str, lock: Path, ops: Sequence[str] = TRAIN_OPS) -> list[str]:
    """Everything `image` must be, as one list of problems (empty: it is)."""
    problems = interpreter_problems()
    problems += torch_problems(cuda=image != "serve")
    problems += lock_problems(lock, IMAGE_EXTRAS[image])
    problems += engine_problems()
    if image == "train":
        import kfp.dsl.executor_main  # noqa: F401  (what KFP's compiled command runs)

        problems += deepspeed_problems(ops)
    return problems


EXAMPLES = """\
examples:
  python3 -m llm_pipeline.cli.image_check train --lock requirements.lock
      the train image's last build step
  python3 -m llm_pipeline.cli.image_check serve --lock requirements.lock
      the CPU serving image's
"""


def build_parser() -> argparse.ArgumentParser:
    """The image to check and the lock it must hold."""
    parser = argparse.ArgumentParser(
        prog="python3 -m llm_pipeline.cli.image_check",
        description="Fail an image's build unless the image is what it claims (each "
        "Dockerfile's last step runs this).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("image", choices=sorted(IMAGE_EXTRAS))
    parser.add_argument("--lock", type=Path, required=True, help="requirements.lock")
    parser.add_argument(
        "--ops", default=",".join(TRAIN_OPS), help="DeepSpeed ops the train image prebuilds"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Check the image named on the command line; print each problem."""
    args = build_parser().parse_args(argv)
    problems = image_problems(args.image, args.lock, tuple(filter(None, args.ops.split(","))))
    for problem in problems:
        print(f"image check ({args.image}): {problem}", file=sys.stderr)
    if not problems:
        print(f"image check ({args.image}): ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
