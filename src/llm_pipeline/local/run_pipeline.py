"""Run a pipeline on this machine with KFP's local SubprocessRunner.

Steps run in this Python environment (`use_venv=False`): the library is already installed
here, which is what makes the local and the Vertex pipelines the same code.
"""

import contextlib
import json
import logging
import re
import shutil
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TextIO

from llm_pipeline.launch.lifetime import watched_by_steps
from llm_pipeline.local.console import REUSED, StepConsole, open_log
from llm_pipeline.local.scratch import run_scratch_folder
from llm_pipeline.local.stopping import StopOnSignal
from llm_pipeline.output_files import ERROR_FILE, Step
from llm_pipeline.progress import format_duration

#: The run's full output (KFP's and every step's), kept in the run's folder.
LOG_FILE = "pipeline.log"
#: Where KFP's local cache keeps its entries, under the pipeline root.
CACHE_FOLDER = ".kfp_cache"


@dataclass(frozen=True)
class StepOutcome:
    """How one step ended and where its outputs are."""

    name: str
    status: Literal["succeeded", "failed", "stopped", "not run"]
    outputs: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    #: Text its artifacts' metadata holds (finetune's `zero_stage`: the stage and why).
    details: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    #: Wall time of the step; 0 for one served from the cache.
    seconds: float = 0.0
    #: The outputs are an earlier run's, reused because the inputs were the same.
    cached: bool = False

    @property
    def time_taken(self) -> str:
        """How long the step took, as the summary and the run report say it ("" if not run)."""
        if self.cached:
            return REUSED
        return "" if self.status == "not run" else format_duration(self.seconds)


@dataclass(frozen=True)
class LocalRun:
    """A finished local run: its folder and every step that started."""

    run_dir: Path | None
    succeeded: bool
    steps: tuple[StepOutcome, ...]
    log_file: Path | None = None
    #: The signal (SIGINT, SIGTERM) that stopped the run; None for a run that ended itself.
    stopped_by: int | None = None

    @property
    def seconds(self) -> float:
        """Time spent in steps (reused ones count nothing)."""
        return sum(step.seconds for step in self.steps)

    def outcome(self, step: Step) -> StepOutcome | None:
        """How `step` ended; None when the run never reached it."""
        return next((s for s in self.steps if s.name == step.display_name), None)


def _outcome(task_dir: Path, *, failed_step: str | None) -> StepOutcome:
    output_file = task_dir / "executor_output.json"
    error_file = task_dir / ERROR_FILE
    error = error_file.read_text().strip() if error_file.exists() else None
    if not output_file.exists():
        ran = task_dir.name == failed_step or task_dir.exists()
        return StepOutcome(name=task_dir.name, status="failed" if ran else "not run", error=error)
    produced = json.loads(output_file.read_text())
    outputs: dict[str, str] = {}
    metrics: dict[str, float] = {}
    details: dict[str, str] = {}
    for name, entry in produced.get("artifacts", {}).items():
        for artifact in entry.get("artifacts", []):
            outputs[name] = artifact["uri"]
            metadata = artifact.get("metadata", {})
            if all(isinstance(value, int | float) for value in metadata.values()):
                metrics.update(metadata)
            else:
                details.update((k, v) for k, v in metadata.items() if isinstance(v, str))
    for name, value in produced.get("parameterValues", {}).items():
        outputs[name] = repr(value)
    # Text outputs declared with OutputPath(str) are files in the task folder, not entries
    # of executor_output.json.
    taken = {Path(uri).name for uri in outputs.values()}
    for file in sorted(task_dir.iterdir()):
        if file.is_file() and file.name not in taken | {output_file.name, ERROR_FILE}:
            outputs[file.name] = file.read_text(encoding="utf-8", errors="replace").strip()
    return StepOutcome(
        name=task_dir.name, status="succeeded", outputs=outputs, metrics=metrics, details=details
    )


def _newest_run_dir(pipeline_root: Path, pipeline_name: str, before: set[Path]) -> Path | None:
    candidates = [
        path
        for path in pipeline_root.glob(f"{pipeline_name}-*")
        if path.is_dir() and path not in before
    ]
    return max(candidates, key=lambda path: path.stat().st_mtime, default=None)


def step_order(pipeline: Any) -> list[str]:
    """Task names in an order that respects dependencies (the order they run here).

    Tasks inside a condition (`dsl.If`) take the condition's place, in their own order.
    """
    spec = pipeline.pipeline_spec
    return _dag_order(spec.root.dag.tasks, spec.components)


def _dag_order(tasks: Any, components: Any) -> list[str]:
    ordered: list[str] = []
    pending = dict(tasks)
    while pending:
        ready = sorted(
            name
            for name, task in pending.items()
            if all(dep in ordered for dep in task.dependent_tasks)
        )
        if not ready:  # a cycle cannot compile; keep the rest in name order regardless
            ready = sorted(pending)
        for name in ready:
            ordered.append(name)
            del pending[name]
    flat: list[str] = []
    for name in ordered:
        component = components[tasks[name].component_ref.name]
        if component.WhichOneof("implementation") == "dag":
            flat.extend(_dag_order(component.dag.tasks, components))
        else:
            flat.append(name)
    return flat


def _failed_step(message: str) -> str | None:
    match = re.search(r"Inner task failed: (\S+)", re.sub(r"\x1b\[[0-9;]*m", "", message))
    return match.group(1).rstrip(".") if match else None


def run_local(
    pipeline: Any,
    *,
    pipeline_root: Path,
    verbose: bool = False,
    arguments: dict[str, Any] | None = None,
    terminal: TextIO | None = None,
) -> LocalRun:
    """Run `pipeline` (a built KFP pipeline function) and summarise each step.

    `arguments` sets pipeline parameters (the rest keep their defaults, the config's
    values). The terminal (default: standard output) shows one line per step event and the
    steps' status lines; `verbose` shows everything KFP prints instead. Either way the whole
    output is kept in the run folder's `pipeline.log`. Steps whose tasks enable caching are
    served from KFP's local cache when their inputs are the same as an earlier run's.

    Ctrl-C or SIGTERM stops the run's processes (`stopping`) and this returns as for a failed
    run, with `stopped_by` set and the interrupted step "stopped"; SIGKILLed, this process
    can do nothing, and the running step stops as on a SIGTERM when it sees this process
    gone (`launch.lifetime.die_with_run`). The steps' temporary files
    (KFP's `mktemp -d` folders among them) go to a folder removed when the run ends.
    """
    # Here, not at the top: the CLI's `clean` and `registry` commands import this package's
    # light modules, and KFP's import (kubernetes' client among it) is half a second.
    from kfp import local

    pipeline_root = pipeline_root.resolve()
    pipeline_root.mkdir(parents=True, exist_ok=True)
    name = pipeline.pipeline_spec.pipeline_info.name
    before = set(pipeline_root.glob(f"{name}-*"))
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(pipeline_root),
        raise_on_error=True,
        enable_caching=True,
        cache_root=str(pipeline_root / CACHE_FOLDER),
    )
    # The steps name the Vertex image; here they run in this very environment on purpose.
    warnings.filterwarnings("ignore", message=".*non-Python base image.*", category=RuntimeWarning)
    failed_step = None
    terminal = terminal or sys.stdout
    with open_log(pipeline_root / ".logs") as log, run_scratch_folder(), watched_by_steps():
        console = StepConsole(terminal=terminal, log=log, verbose=verbose)
        with StopOnSignal(say=console.stopping) as stopper, _printing_to(console):
            try:
                pipeline(**(arguments or {}))
            except RuntimeError as exc:
                failed_step = _failed_step(str(exc)) or "?"
    run_dir = _newest_run_dir(pipeline_root, name, before)
    log_file = Path(log.name)
    if run_dir is not None:
        log_file = Path(shutil.move(log_file, run_dir / LOG_FILE))
    steps = []
    for task in step_order(pipeline):
        timing = console.timings.get(task)
        if timing is not None and timing.cache_key:
            outcome = _cached_outcome(task, pipeline_root / CACHE_FOLDER, timing.cache_key)
        else:
            outcome = _outcome((run_dir or pipeline_root) / task, failed_step=failed_step)
        if stopper.signum is not None and outcome.status == "failed":
            outcome = replace(outcome, status="stopped")
        steps.append(replace(outcome, seconds=timing.seconds if timing else 0.0))
    return LocalRun(
        run_dir=run_dir,
        succeeded=failed_step is None and stopper.signum is None,
        steps=tuple(steps),
        log_file=log_file,
        stopped_by=stopper.signum,
    )


@contextlib.contextmanager
def _printing_to(console: StepConsole) -> Iterator[None]:
    """Standard output and the root logger (KFP logs there, at INFO) go to `console`."""
    root = logging.getLogger()
    handler = logging.StreamHandler(console)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with contextlib.redirect_stdout(console):
            yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        console.flush()


def _cached_outcome(task: str, cache: Path, key: str) -> StepOutcome:
    """A step served from KFP's cache: the outcome of the run that made its outputs."""
    for entry in sorted(cache.glob(f"{key}*.json")):
        try:
            outputs = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        folders = {
            Path(value["uri"]).parent
            for value in outputs.values()
            if isinstance(value, dict) and value.get("uri")
        }
        if len(folders) == 1:
            return replace(_outcome(folders.pop(), failed_step=None), name=task, cached=True)
    return StepOutcome(name=task, status="succeeded", cached=True)
