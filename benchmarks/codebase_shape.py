"""Issue 19's before/after table: is the codebase one a newcomer can carry on?

The issue asks for fewer, fuller modules, no import cycles, a shorter way from the command
to the training loop and less written twice. Each of those is measured here on two git
revisions of this repository, each checked out into a temporary `git worktree` (removed
afterwards, Ctrl-C included), so the figures come from the code itself, not from memory:

1. the .py files under src/llm_pipeline and their lines;
2. modules under 40 lines, and those of them that are neither a package's face
   (`__init__.py`, `__main__.py`) nor a per-step module (components/*.py, steps/*.py);
3. import cycles, as tests/test_import_cycles.py finds them: among the imports a module
   runs when it is imported, and again counting those inside functions and under
   `if TYPE_CHECKING:` (a deferred import is still a dependency);
4. the files a reader follows from `pipeline.py` to `Trainer.train`, measured by running
   the real offline pipeline, tiny, with a `sitecustomize.py` that records the Python stack
   at every `subprocess.Popen` and at `Trainer.train` in every process; the chain is the
   rank's stack plus, in each ancestor process, the stack of the Popen that started it;
5. the pairs the `duplicates` tool lists (when it is installed).

    .venv/bin/python benchmarks/codebase_shape.py [--before aa22c27] [--after HEAD]
        [--skip-run] [--duplicates-cmd PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "llm_pipeline"
#: Modules shorter than this many lines count as small (the issue's "~40 lines").
SMALL_LINES = 40
#: Package faces: a small one is fine, it only names what the package offers.
FACES = {"__init__.py", "__main__.py"}
#: One module per pipeline step in each of these packages, short by design.
PER_STEP_PACKAGES = {"components", "steps"}
#: The environment variable naming the file the recorder appends its JSON lines to.
TRACE_VAR = "CODEBASE_SHAPE_TRACE"
#: KFP's local runner writes a component's embedded source to a file of this name.
COMPONENT_FILE = "ephemeral_component.py"
#: The offline demo, made tiny: a few steps and examples, no baseline model, no deploy.
TINY_RUN = {
    "data.max_samples": '{"train": 32, "validation": 8, "test": 4}',
    "train.max_steps": "2",
    "train.warmup_steps": "0",
    "evaluate.max_samples": "4",
    "evaluate.score_base_model": "false",
    "evaluate.bootstrap_samples": "0",
    "deploy_policy.override": "never",
}

#: Put first on PYTHONPATH in a folder of its own: Python imports it at start-up in every
#: process of the run (pipeline, KFP step executors, torchrun, ranks).
SITECUSTOMIZE = r'''
"""Recorder for benchmarks/codebase_shape.py: the Python stack at each subprocess.Popen and
at transformers.Trainer.train, one JSON line per event, in the file $CODEBASE_SHAPE_TRACE."""
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import traceback

_TRACE = os.environ.get("CODEBASE_SHAPE_TRACE")


def _ancestors():
    pids, pid = [], os.getpid()
    for _ in range(64):
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 0:
            break
        pids.append(pid)
    return pids


def _record(event, child=None):
    if not _TRACE:
        return
    try:
        package = sys.modules.get("llm_pipeline")
        line = {
            "event": event,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "ancestors": _ancestors(),
            "child": child,
            "argv": list(sys.argv),
            "llm_pipeline": getattr(package, "__file__", None),
            "files": [frame.filename for frame in traceback.extract_stack()[:-2]],
        }
        with open(_TRACE, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    except Exception:
        pass


_popen_init = subprocess.Popen.__init__


def _init(self, *args, **kwargs):
    _popen_init(self, *args, **kwargs)
    _record("popen", child=self.pid)


subprocess.Popen.__init__ = _init


def _wrap_train(module):
    trainer = getattr(module, "Trainer", None)
    if trainer is None or getattr(trainer.train, "_recorded", False):
        return
    train = trainer.train

    def recorded(self, *args, **kwargs):
        _record("train")
        return train(self, *args, **kwargs)

    recorded._recorded = True
    trainer.train = recorded


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps Trainer.train right after transformers.trainer is executed."""

    def find_spec(self, name, path, target=None):
        if name != "transformers.trainer":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _wrap_train(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
'''


# --- static measures -------------------------------------------------------------------


def package_files(src: Path) -> list[Path]:
    """The .py files of the package under `src` (src/llm_pipeline), sorted."""
    return sorted((src / PACKAGE).rglob("*.py"))


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def is_face_or_step(path: Path, src: Path) -> bool:
    """A package's face or a per-step module: short by design, not a sign of scattering."""
    relative = path.relative_to(src / PACKAGE)
    one_step = len(relative.parts) == 2 and relative.parts[0] in PER_STEP_PACKAGES
    return path.name in FACES or one_step


def module_name(path: Path, src: Path) -> str:
    """src/llm_pipeline/a/b.py → llm_pipeline.a.b; a package's __init__.py is the package."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_cycles(src: Path, *, on_import_only: bool) -> list[list[str]]:
    """The import cycles of the checkout at `src`, found as the suite finds them
    (`tests/test_import_cycles.py`, of this repository, applied to that checkout's source):
    with `on_import_only`, among the imports a module runs when imported; without, counting
    the imports its functions make and those under `if TYPE_CHECKING:` too."""
    sys.path.insert(0, str(REPO))
    try:
        from tests.test_import_cycles import import_cycles as find
    finally:
        sys.path.remove(str(REPO))
    return find(src / PACKAGE, on_import_only=on_import_only)


class ChainError(Exception):
    """The recorded events do not make a chain from pipeline.py to Trainer.train."""


def read_records(lines: Iterable[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


def rebuild_chains(records: Sequence[Mapping[str, Any]], root_pid: int) -> list[list[str]]:
    """For each Trainer.train event: the frames from the `root_pid` process down to it.

    A process's own stack at Trainer.train comes last; before it, in each ancestor process
    (found through the recorded ancestry, /proc's ppids), the stack of the Popen that
    started the next process on the way. A non-Python ancestor (a shell KFP starts the step
    in) has no records and adds nothing; a Python ancestor whose Popens did not start the
    next process breaks the chain, as does not reaching `root_pid`.
    """
    by_pid: dict[int, list[Mapping[str, Any]]] = {}
    for record in records:
        by_pid.setdefault(record["pid"], []).append(record)
    chains = []
    trains = [r for r in records if r["event"] == "train"]
    if not trains:
        raise ChainError("no process entered Trainer.train")
    for train in trains:
        path = [train["pid"], *train["ancestors"]]
        if root_pid not in path:
            raise ChainError(
                f"Trainer.train in {train['pid']} does not descend from "
                f"the pipeline process {root_pid}"
            )
        frames = list(train["files"])
        for child, parent in itertools.pairwise(path[: path.index(root_pid) + 1]):
            popens = [
                r for r in by_pid.get(parent, []) if r["event"] == "popen" and r["child"] == child
            ]
            if popens:
                frames = list(popens[0]["files"]) + frames
            elif parent in by_pid:
                argv = " ".join(by_pid[parent][0]["argv"])
                raise ChainError(
                    f"process {parent} ({argv}) started {child} without subprocess.Popen"
                )
        chains.append(frames)
    return chains


def repo_file(filename: str, checkout: Path) -> str | None:
    """The chain's name for a frame's file: the checkout's own files relative to it (the
    package's relative to src/), any KFP component's embedded source "component", else None.
    A frame from another llm_pipeline (the editable install) means the measure is wrong."""
    path = Path(filename)
    if path.name == COMPONENT_FILE:
        return "component"
    if path == checkout / "pipeline.py":
        return "pipeline.py"
    if path.is_relative_to(checkout / "src" / PACKAGE):
        return str(path.relative_to(checkout / "src"))
    if PACKAGE in path.parts and "site-packages" not in path.parts:
        raise ChainError(f"a frame runs {filename}, not the checkout's copy under {checkout}")
    return None


def chain_files(frames: Iterable[str], checkout: Path) -> list[str]:
    """The repository's files on a chain of frames, each once, in the order first met."""
    files: list[str] = []
    for frame in frames:
        name = repo_file(frame, checkout)
        if name is not None and name not in files:
            files.append(name)
    return files


def longest_chain(records: Sequence[Mapping[str, Any]], root_pid: int, checkout: Path) -> list[str]:
    """The longest file chain from the pipeline process to a Trainer.train; every record's
    llm_pipeline must be the checkout's."""
    for record in records:
        loaded = record.get("llm_pipeline")
        if loaded and not Path(loaded).is_relative_to(checkout / "src"):
            raise ChainError(f"process {record['pid']} imported llm_pipeline from {loaded}")
    chains = [chain_files(c, checkout) for c in rebuild_chains(records, root_pid)]
    return max(chains, key=len)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End what is left of the run's process group (its own session), politely then not."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def trace_pipeline(checkout: Path, python: str, timeout_s: float) -> tuple[list[str], str]:
    """Run the checkout's offline pipeline, tiny, under the recorder; return the chain and
    where the traced processes imported llm_pipeline from."""
    with tempfile.TemporaryDirectory(prefix="codebase-shape-run-") as scratch:
        work = Path(scratch)
        (work / "site").mkdir()
        (work / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        trace = work / "trace.jsonl"
        settings = {**TINY_RUN, "deploy.registry_dir": str(work / "runs" / "registry")}
        command = [python, str(checkout / "pipeline.py")]
        command += ["--config", str(checkout / "configs" / "local.json")]
        command += ["--pipeline-root", str(work / "runs")]
        for key, value in settings.items():
            command += ["--set", f"{key}={value}"]
        python_path = [str(work / "site"), str(checkout / "src"), os.environ.get("PYTHONPATH")]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, python_path)),
            "PATH": os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")]),
            TRACE_VAR: str(trace),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
        }
        log = work / "run.log"
        print(f"running {checkout.name}: {shlex.join(command)}", file=sys.stderr, flush=True)
        start = time.monotonic()
        with log.open("wb") as out:
            # Its own session, so that the whole tree of steps and ranks can be ended at once.
            process = subprocess.Popen(
                command,
                cwd=work,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired as exc:
                raise ChainError(f"the run took more than {timeout_s:.0f} s") from exc
            finally:
                _stop(process)
        print(f"  done in {time.monotonic() - start:.0f} s, exit {code}", file=sys.stderr)
        if code != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:]
            raise ChainError(f"the pipeline exited {code}:\n" + "\n".join(tail))
        if not trace.exists():
            raise ChainError("nothing was recorded: sitecustomize.py did not load")
        records = read_records(trace.read_text(encoding="utf-8").splitlines())
        chain = longest_chain(records, process.pid, checkout)
        loaded = sorted({str(r["llm_pipeline"]) for r in records if r.get("llm_pipeline")})
        processes = len({r["pid"] for r in records})
        return chain, f"{processes} traced processes imported llm_pipeline from {loaded}"


# --- duplicates ------------------------------------------------------------------------


def duplicate_pairs(command: str, folder: Path) -> str:
    """The pair count `duplicates` prints for `folder` (it reads the files git tracks)."""
    result = subprocess.run(
        [command, "--repo", str(folder), "--seconds", "300"],
        capture_output=True,
        text=True,
        check=False,
    )
    first = result.stdout.strip().splitlines()[:1]
    if first and first[0].startswith("no duplicates"):
        count = "0"
    elif first and (match := re.match(r"(\d+) pairs?\b", first[0])):
        count = match.group(1)
    else:
        return f"n/a ({(result.stdout + result.stderr).strip()[:80] or 'no output'})"
    return count + (" (incomplete)" if "incomplete:" in result.stdout else "")


# --- the two checkouts and the table ----------------------------------------------------


@dataclass
class Shape:
    """One revision's figures; a string where a figure could not be had."""

    revision: str
    files: int = 0
    lines: int = 0
    small: int = 0
    small_scattered: int = 0
    cycles: list[list[str]] = field(default_factory=list)
    named_cycles: list[list[str]] = field(default_factory=list)
    chain: list[str] | str = "n/a (not run)"
    chain_note: str = ""
    duplicates_tree: str = "n/a"
    duplicates_package: str = "n/a"


@contextlib.contextmanager
def worktree(repo: Path, revision: str) -> Iterator[Path]:
    """`revision` checked out (detached) in a temporary worktree, removed on any exit."""
    scratch = Path(tempfile.mkdtemp(prefix="codebase-shape-"))
    path = scratch / revision.replace("/", "_")
    git = ["git", "-C", str(repo)]
    subprocess.run(
        [*git, "worktree", "add", "--quiet", "--detach", str(path), revision], check=True
    )
    try:
        yield path
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(path)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)
        subprocess.run([*git, "worktree", "prune"], check=False)


def measure(
    checkout: Path,
    revision: str,
    *,
    run: bool,
    python: str,
    timeout_s: float,
    duplicates: str | None,
) -> Shape:
    src = checkout / "src"
    files = package_files(src)
    lines = {path: line_count(path) for path in files}
    small = [path for path in files if lines[path] < SMALL_LINES]
    shape = Shape(
        revision=revision,
        files=len(files),
        lines=sum(lines.values()),
        small=len(small),
        small_scattered=sum(not is_face_or_step(path, src) for path in small),
        cycles=import_cycles(src, on_import_only=True),
        named_cycles=import_cycles(src, on_import_only=False),
    )
    if run:
        try:
            shape.chain, shape.chain_note = trace_pipeline(checkout, python, timeout_s)
        except ChainError as exc:
            shape.chain = f"n/a ({exc})"
    if duplicates is None:
        shape.duplicates_tree = shape.duplicates_package = (
            "n/a (the duplicates tool is not installed)"
        )
    else:
        shape.duplicates_tree = duplicate_pairs(duplicates, checkout)
        shape.duplicates_package = duplicate_pairs(duplicates, src / PACKAGE)
    return shape


def _ratio(before: object, after: object) -> str:
    try:
        a, b = float(str(after).split()[0]), float(str(before).split()[0])
    except ValueError:
        return "n/a"
    return f"{a / b:.2f}" if b else "n/a"


def _cell(value: object) -> str:
    return str(value).split(" (", 1)[0] if str(value).startswith("n/a") else str(value)


def table(before: Shape, after: Shape) -> str:
    """The Markdown table, then each revision's cycles, chain and anything that failed."""

    def chain_length(shape: Shape) -> object:
        return len(shape.chain) if isinstance(shape.chain, list) else shape.chain

    rows: list[tuple[str, object, object]] = [
        (".py files under src/llm_pipeline", before.files, after.files),
        ("lines in them", before.lines, after.lines),
        (f"modules under {SMALL_LINES} lines", before.small, after.small),
        (
            "… not a package face (__init__, __main__) nor per-step (components/, steps/)",
            before.small_scattered,
            after.small_scattered,
        ),
        ("import cycles, imports run at import time", len(before.cycles), len(after.cycles)),
        (
            "… counting imports inside functions and under TYPE_CHECKING too",
            len(before.named_cycles),
            len(after.named_cycles),
        ),
        (
            "files from pipeline.py to Trainer.train (run, traced)",
            chain_length(before),
            chain_length(after),
        ),
        ("`duplicates` pairs, whole tree", before.duplicates_tree, after.duplicates_tree),
        (
            "`duplicates` pairs, src/llm_pipeline",
            before.duplicates_package,
            after.duplicates_package,
        ),
    ]
    out = [
        f"| measure | before ({before.revision}) | after ({after.revision}) | after/before |",
        "|---|---:|---:|---:|",
    ]
    for label, b, a in rows:
        out.append(f"| {label} | {_cell(b)} | {_cell(a)} | {_ratio(b, a)} |")
    for shape, which in ((before, "before"), (after, "after")):
        out.append("")
        out.append(f"{which} ({shape.revision}): {len(shape.cycles)} import cycle(s)")
        for i, cycle in enumerate(shape.cycles, 1):
            out.append(f"  cycle {i}: " + ", ".join(cycle))
        out.append(f"{which}: {len(shape.named_cycles)} counting deferred imports too")
        for i, cycle in enumerate(shape.named_cycles, 1):
            out.append(f"  deferred cycle {i}: " + ", ".join(cycle))
        if isinstance(shape.chain, list):
            out.append(f"{which}: pipeline.py → Trainer.train, {len(shape.chain)} files:")
            out.extend(f"  {i}. {name}" for i, name in enumerate(shape.chain, 1))
            out.append(f"  ({shape.chain_note})")
        else:
            out.append(f"{which}: chain {shape.chain}")
        if shape.duplicates_tree.startswith("n/a"):
            out.append(f"{which}: duplicates {shape.duplicates_tree}")
    return "\n".join(out)


def short_revision(repo: Path, revision: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", f"{revision}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"error: {revision!r} is not a revision of {repo}")
    return result.stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="aa22c27", help="revision before (aa22c27)")
    parser.add_argument("--after", default="HEAD", help="revision after (HEAD)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the git repository")
    parser.add_argument(
        "--python", default=sys.executable, help="the Python that runs the pipelines (this one)"
    )
    parser.add_argument(
        "--skip-run", action="store_true", help="do not run the pipelines (the chain is then n/a)"
    )
    parser.add_argument(
        "--run-timeout", type=float, default=1800, help="seconds one pipeline run may take (1800)"
    )
    parser.add_argument("--duplicates-cmd", help="the duplicates tool (default: on PATH)")
    args = parser.parse_args(argv)
    duplicates = args.duplicates_cmd or shutil.which("duplicates")
    shapes = []
    for revision in (args.before, args.after):
        name = short_revision(args.repo, revision)
        with worktree(args.repo, name) as checkout:
            shapes.append(
                measure(
                    checkout,
                    name,
                    run=not args.skip_run,
                    python=args.python,
                    timeout_s=args.run_timeout,
                    duplicates=duplicates,
                )
            )
    print(table(*shapes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
