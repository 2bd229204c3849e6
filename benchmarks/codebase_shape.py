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
5. the pairs the `duplicates` tool lists (when it is installed);
6. issue 27's: each task's modules outside its package and their lines
   (`task_modules_outside` says exactly which count); the comparisons of a task or model-kind
   name outside `tasks/`, and every pick by name, found by tests/task_names.py, the detector
   tests/test_task_seam.py holds the tree to; and the modules whose functions run under
   `steps/evaluate.py::run_evaluate` in the same traced run (a profile hook in the evaluate
   step's process while run_evaluate is on its stack, and in every process it starts; a
   class body run by an import counts as a function), and of them those under
   `evaluate_in_processes` alone (the evaluation flow, without the champion's registry and
   the step's outputs).
   The task and kind names are those of this repository's registry (the same three tasks
   on both revisions).

    .venv/bin/python benchmarks/codebase_shape.py [--before aa22c27] [--after HEAD]
        [--skip-run] [--duplicates-cmd PATH]
"""

from __future__ import annotations

import argparse
import ast
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


# The modules whose code runs under each root function: steps/evaluate.py::run_evaluate (the
# whole step) and evaluate_in_processes (the evaluation flow alone, under evaluation/). In the
# evaluate step's process, every Python function called while the root is on the stack; in
# the processes started meanwhile (evaluation ranks, which inherit _VISITS, the roots then
# active), every function called.
_VISITS = "CODEBASE_SHAPE_VISITS"
_ROOTS = (
    ("run_evaluate", "/llm_pipeline/steps/evaluate.py"),
    ("evaluate_in_processes", "/llm_pipeline/evaluation/"),
)
_visited = {name: set() for name, _ in _ROOTS}
_active = {name: [] for name, _ in _ROOTS}
_inherited = [name for name in os.environ.get(_VISITS, "").split(",") if name in _visited]


def _evaluate_step():
    argv = list(sys.argv)
    if "--function_to_execute" in argv[:-1]:
        return argv[argv.index("--function_to_execute") + 1] == "evaluate"
    return "--function_to_execute=evaluate" in argv


def _export_active():
    names = [name for name, frames in _active.items() if frames]
    if names:
        os.environ[_VISITS] = ",".join(names)
    else:
        os.environ.pop(_VISITS, None)


def _under_roots(frame, event, arg):
    code = frame.f_code
    if event == "call":
        for name, where in _ROOTS:
            if code.co_name == name and where in code.co_filename:
                _active[name].append(frame)
                _export_active()
        if code.co_name != "<module>":
            for name, frames in _active.items():
                if frames:
                    _visited[name].add(code.co_filename)
    elif event == "return":
        for frames in _active.values():
            if frames and frame is frames[-1]:
                frames.pop()
                _export_active()


def _anywhere(frame, event, arg):
    if event == "call" and frame.f_code.co_name != "<module>":
        for name in _inherited:
            _visited[name].add(frame.f_code.co_filename)


def _write_visits():
    if any(_visited.values()) and _TRACE:
        try:
            line = {
                "event": "visits",
                "pid": os.getpid(),
                "files": sorted(_visited["run_evaluate"]),
                "flow_files": sorted(_visited["evaluate_in_processes"]),
            }
            with open(_TRACE, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        except Exception:
            pass


if _TRACE and (_inherited or _evaluate_step()):
    import atexit
    import threading

    _profile = _anywhere if _inherited else _under_roots
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    atexit.register(_write_visits)
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


# --- what of a task lives outside its package -------------------------------------------


def seam_tools() -> tuple[Any, Any, Any]:
    """tests/task_names.py, tests/module_imports.py and tests/test_import_cycles.py of this
    repository, and the vocabulary of its task registry (the same tasks on both revisions)."""
    for path in (REPO / "src", REPO):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    from tests import task_names, test_import_cycles

    return task_names, test_import_cycles, task_names.vocabulary()


def name_picks(src: Path) -> tuple[int, int]:
    """Outside tasks/: the comparisons (and `match` cases) that pick a task or a model kind
    by name, and every pick by name tests/task_names.py finds (tables keyed by names, names
    passed or looked up, kinds by their constants' names) — the same detector as
    tests/test_task_seam.py."""
    task_names, _, words = seam_tools()
    found = [
        finding
        for path in task_names.outside_tasks(src / PACKAGE)
        for finding in task_names.findings(path.read_text(encoding="utf-8"), words, str(path))
    ]
    compared = [f for f in found if f.what.startswith(("compares", "matches"))]
    return len(compared), len(found)


#: A module's name and a task's are the same word when equal or, both of at least this many
#: letters, when they start alike: `classifier` and `classification`, `summarizer` and
#: `summarization` (but not `summary`).
STEM_LETTERS = 7


def _words(text: str) -> set[str]:
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text)
    return {word.lower() for word in re.split(r"[^A-Za-z0-9]+|_", spaced) if word}


def _same_word(a: str, b: str) -> bool:
    return a == b or (min(len(a), len(b)) >= STEM_LETTERS and a[:STEM_LETTERS] == b[:STEM_LETTERS])


def task_modules_outside(src: Path) -> dict[str, list[tuple[str, int]]]:
    """Each task's modules outside tasks/, with their lines: the modules one task alone uses.

    A module outside `tasks/` is task T's when
    1. its name is T's: a word of its path under llm_pipeline/ (split at `/`, `_` and `.`)
       is a word of T's registry name or class name (`text_classification`,
       `TextClassification`) and of no other task's (`_same_word`: `classifier` is
       `classification`'s); or
    2. T alone uses it: every use of it is T's. A use is each place an importer reads a name
       it imported from the module (or the import itself, if it reads none; or an
       `import_module` of its name), in any function or under TYPE_CHECKING. A use is T's
       when the importer is T's own (under `tasks/`: `tasks/<T>.py` or `tasks/<T>/`) or T's
       by 1 or 2, or when it is on T's path: under an `if`/conditional-expression branch that
       a comparison of a name selects for T alone (`if kind == "classifier":`, the `else` of
       `!=`, what follows an `if kind != "classifier": return`; a kind's name selects the
       tasks of that kind), or the value of a table keyed by
       names, or in a module-level function that the importer calls only from such places
       (followed through the importer's own functions, not into other modules).
       Repeated until nothing changes.
    A module two tasks use is shared, not either's. A renamed module escapes 1 but not 2; to
    escape 2, shared code must use it outside any branch on a name, which is then a use by
    every task (or a branch the name counts of `name_picks` show). Module docstrings are
    not read: they may name a task as an example.
    """
    _, cycles, words = seam_tools()
    from llm_pipeline.tasks import TASKS

    tasks = sorted(words.tasks)
    kind_of = {task: TASKS[task].model_kind.name for task in tasks}
    by_name = {
        **{task: {task} for task in tasks},
        **{kind: {t for t in tasks if kind_of[t] == kind} for kind in words.kinds},
    }
    task_words = {task: _words(task) | _words(TASKS[task].__name__) for task in tasks}
    modules = set(cycles.import_graph(src / PACKAGE, on_import_only=False))
    owner: dict[str, str] = {}
    for module in modules:
        parts = module.split(".")
        if len(parts) > 2 and parts[1] == "tasks" and parts[2] in words.tasks:
            owner[module] = parts[2]
    inside = set(owner)
    shared_tasks = {m for m in modules if m.split(".")[1:2] == ["tasks"]} - inside

    def named(module: str) -> set[str]:
        mine = _words(".".join(module.split(".")[1:]))
        return {
            task
            for task in tasks
            if any(_same_word(w, t) for w in mine for t in task_words[task])
            and not any(
                _same_word(w, t) for w in mine for o in tasks if o != task for t in task_words[o]
            )
        }

    for module in modules - inside - shared_tasks:
        if len(found := named(module)) == 1:
            owner[module] = found.pop()
    uses = {
        module_name_of(path, src): path_uses(path, src, modules, by_name, set(tasks))
        for path in sorted((src / PACKAGE).rglob("*.py"))
    }
    changed = True
    while changed:
        changed = False
        for module in sorted(modules - set(owner) - shared_tasks):
            users: set[str] = set()
            used = False
            for importer, found in uses.items():
                if module not in found or importer == module:
                    continue
                used = True
                users |= {owner[importer]} if importer in owner else found[module]
            if used and len(users) == 1:
                owner[module] = users.pop()
                changed = True
    result: dict[str, list[tuple[str, int]]] = {task: [] for task in tasks}
    for module, task in sorted(owner.items()):
        if module not in inside:
            path = src / Path(*module.split("."))
            file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
            result[task].append((module.removeprefix(f"{PACKAGE}."), line_count(file)))
    return result


def module_name_of(path: Path, src: Path) -> str:
    return module_name(path, src)


def _selected(
    test: ast.expr, by_name: Mapping[str, set[str]], every: set[str]
) -> tuple[set[str], set[str]]:
    """The tasks for which a branch's test is true and false: a comparison of a name selects
    that name's tasks; any other test selects every task both ways."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        texts = [
            node.value
            for operand in (test.left, *test.comparators)
            for node in ast.walk(operand)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        picked = set().union(*(by_name[t] for t in texts if t in by_name))
        if picked:
            if isinstance(test.ops[0], ast.Eq | ast.Is | ast.In):
                return picked, every - picked
            if isinstance(test.ops[0], ast.NotEq | ast.IsNot | ast.NotIn):
                return every - picked, picked
    return every, every


def path_uses(
    path: Path,
    src: Path,
    modules: set[str],
    by_name: Mapping[str, set[str]],
    every: set[str],
) -> dict[str, set[str]]:
    """The llm_pipeline modules `path` uses, each with the tasks on whose path it does."""
    importer = module_name(path, src)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    top_functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }

    def branch(node: ast.AST) -> tuple[set[str], str | None]:
        """The tasks whose path `node` is on within its module-level function (or the
        module), and that function's name."""
        selected, current = set(every), node
        while current in parents:
            parent = parents[current]
            if isinstance(parent, ast.If | ast.IfExp):
                true, false = _selected(parent.test, by_name, every)
                body = parent.body if isinstance(parent, ast.If) else [parent.body]
                orelse = parent.orelse if isinstance(parent, ast.If) else [parent.orelse]
                if any(current is item for item in body):
                    selected &= true
                elif any(current is item for item in orelse):
                    selected &= false
            # After `if <test>: ... return` in the same block, only the test's false side.
            for block in (getattr(parent, name, None) for name in ("body", "orelse")):
                if isinstance(block, list) and any(current is item for item in block):
                    for earlier in block[: next(i for i, x in enumerate(block) if x is current)]:
                        exits = isinstance(earlier, ast.If) and not earlier.orelse
                        if exits and isinstance(earlier.body[-1], ast.Return | ast.Raise):
                            selected &= _selected(earlier.test, by_name, every)[1]
            if isinstance(parent, ast.Dict):
                # A table keyed by names: `{"causal_lm": Completer, ...}[kind]`.
                for key, value in zip(parent.keys, parent.values, strict=True):
                    if value is current and isinstance(key, ast.Constant):
                        selected &= by_name.get(str(key.value), every)
            if parent is tree:
                return selected, None
            if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef) and parent is tree:
                return selected, current.name
            if (
                isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef)
                and parents.get(parent) is tree
            ):
                return selected, parent.name
            current = parent
        return selected, None

    loads: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loads.setdefault(node.id, []).append(node)
    # Each module-level function's tasks: those of the places this module calls it from;
    # every task if it calls it from none (another module may).
    function_tasks = {name: set(every) for name in top_functions}
    changed = True
    while changed:
        changed = False
        for name in top_functions:
            sites = [site for site in loads.get(name, []) if branch(site)[1] != name]
            if not sites:
                continue
            found: set[str] = set()
            for site in sites:
                selected, caller = branch(site)
                found |= selected & (function_tasks[caller] if caller else every)
            if found != function_tasks[name]:
                function_tasks[name] = found
                changed = True

    def tasks_at(node: ast.AST) -> set[str]:
        selected, function = branch(node)
        return selected & (function_tasks[function] if function else every)

    result: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        bound: list[tuple[str | None, str]] = []  # (local name, module)
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                target = full if full in modules else base
                bound.append((alias.asname or alias.name, target))
        elif isinstance(node, ast.Import):
            bound = [(alias.asname, alias.name) for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            bound = [(None, node.args[0].value)]
        for local, target in bound:
            if target not in modules or target == importer:
                continue
            sites = loads.get(local, []) if local else []
            found = set().union(*(tasks_at(site) for site in sites)) if sites else tasks_at(node)
            result[target] = result.get(target, set()) | found
    return result


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


def evaluate_visits(
    records: Sequence[Mapping[str, Any]], checkout: Path, *, key: str = "files"
) -> list[str]:
    """The checkout's llm_pipeline modules whose functions ran for `run_evaluate` (`key`
    "files"), or for `evaluate_in_processes`, the evaluation flow alone ("flow_files"): the
    `visits` records of the evaluate step's process and the processes it started."""
    source = checkout / "src"
    files = {
        Path(name)
        for record in records
        if record["event"] == "visits"
        for name in record.get(key, [])
    }
    return sorted(
        module_name(path, source) for path in files if path.is_relative_to(source / PACKAGE)
    )


@dataclass
class Trace:
    """What one traced run of the pipeline shows."""

    chain: list[str]
    note: str
    visits: list[str]
    flow_visits: list[str]


def trace_pipeline(checkout: Path, python: str, timeout_s: float) -> Trace:
    """Run the checkout's offline pipeline, tiny, under the recorder; return the chain, where
    the traced processes imported llm_pipeline from, and the modules evaluate ran."""
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
        calls = [r for r in records if r["event"] != "visits"]
        chain = longest_chain(calls, process.pid, checkout)
        loaded = sorted({str(r["llm_pipeline"]) for r in records if r.get("llm_pipeline")})
        processes = len({r["pid"] for r in records})
        note = f"{processes} traced processes imported llm_pipeline from {loaded}"
        return Trace(
            chain,
            note,
            evaluate_visits(records, checkout),
            evaluate_visits(records, checkout, key="flow_files"),
        )


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
    name_comparisons: int = 0
    name_picks: int = 0
    task_modules: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    visits: list[str] | str = "n/a (not run)"
    flow_visits: list[str] | str = "n/a (not run)"
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
        task_modules=task_modules_outside(src),
    )
    shape.name_comparisons, shape.name_picks = name_picks(src)
    if run:
        try:
            trace = trace_pipeline(checkout, python, timeout_s)
        except ChainError as exc:
            shape.chain = shape.visits = shape.flow_visits = f"n/a ({exc})"
        else:
            shape.chain, shape.chain_note = trace.chain, trace.note
            shape.visits = trace.visits or "n/a (no evaluate process recorded its calls)"
            shape.flow_visits = trace.flow_visits or "n/a (evaluate_in_processes not recorded)"
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

    def count(value: list[str] | str) -> object:
        return len(value) if isinstance(value, list) else value

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
        *task_rows(before, after),
        (
            "comparisons of a task or model-kind name outside tasks/",
            before.name_comparisons,
            after.name_comparisons,
        ),
        (
            "… every pick by name (tables, lookups, arguments, kind constants)",
            before.name_picks,
            after.name_picks,
        ),
        (
            "modules run_evaluate runs code of (run, traced)",
            count(before.visits),
            count(after.visits),
        ),
        (
            "… of them, modules evaluate_in_processes runs code of (the evaluation flow alone)",
            count(before.flow_visits),
            count(after.flow_visits),
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
        for task, found in shape.task_modules.items():
            lines = sum(n for _, n in found)
            out.append(f"{which}: {task} outside its package, {len(found)} modules, {lines} lines:")
            out.extend(f"  {module} ({n})" for module, n in found)
        if isinstance(shape.visits, list):
            out.append(f"{which}: run_evaluate ran code of {len(shape.visits)} modules:")
            out.extend(f"  {module}" for module in shape.visits)
        else:
            out.append(f"{which}: run_evaluate's modules {shape.visits}")
        if isinstance(shape.flow_visits, list):
            out.append(
                f"{which}: evaluate_in_processes ran code of {len(shape.flow_visits)} modules:"
            )
            out.extend(f"  {module}" for module in shape.flow_visits)
        else:
            out.append(f"{which}: evaluate_in_processes's modules {shape.flow_visits}")
        if shape.duplicates_tree.startswith("n/a"):
            out.append(f"{which}: duplicates {shape.duplicates_tree}")
    return "\n".join(out)


def task_rows(before: Shape, after: Shape) -> list[tuple[str, object, object]]:
    """Per task: its modules outside its package, and their lines (`task_modules_outside`)."""
    rows: list[tuple[str, object, object]] = []
    for task in sorted(set(before.task_modules) | set(after.task_modules)):
        b, a = before.task_modules.get(task, []), after.task_modules.get(task, [])
        rows.append((f"{task}: modules outside its package", len(b), len(a)))
        rows.append(("… their lines", sum(n for _, n in b), sum(n for _, n in a)))
    return rows


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
