"""Run a pipeline on this machine with KFP's local SubprocessRunner.

Steps run in this Python environment (`use_venv=False`): the library is already installed
here, which is what makes the local and the Vertex pipelines the same code.
"""

import json
import logging
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kfp import local

from llm_pipeline.steps.errors import ERROR_FILE


@dataclass(frozen=True)
class StepOutcome:
    """How one step ended and where its outputs are."""

    name: str
    status: Literal["succeeded", "failed", "not run"]
    outputs: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class LocalRun:
    """A finished local run: its folder and every step that started."""

    run_dir: Path | None
    succeeded: bool
    steps: tuple[StepOutcome, ...]


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
    for name, entry in produced.get("artifacts", {}).items():
        for artifact in entry.get("artifacts", []):
            outputs[name] = artifact["uri"]
            metadata = artifact.get("metadata", {})
            if all(isinstance(value, int | float) for value in metadata.values()):
                metrics.update(metadata)
    for name, value in produced.get("parameterValues", {}).items():
        outputs[name] = repr(value)
    # Text outputs declared with OutputPath(str) are files in the task folder, not entries
    # of executor_output.json.
    taken = {Path(uri).name for uri in outputs.values()}
    for file in sorted(task_dir.iterdir()):
        if file.is_file() and file.name not in taken | {output_file.name, ERROR_FILE}:
            outputs[file.name] = file.read_text(encoding="utf-8", errors="replace").strip()
    return StepOutcome(name=task_dir.name, status="succeeded", outputs=outputs, metrics=metrics)


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
    quiet: bool = False,
    arguments: dict[str, Any] | None = None,
) -> LocalRun:
    """Run `pipeline` (a built KFP pipeline function) and summarise each step.

    `arguments` sets pipeline parameters (the rest keep their defaults, the config's
    values); `quiet` hides KFP's per-task log dump (executor inputs).
    """
    pipeline_root = pipeline_root.resolve()
    pipeline_root.mkdir(parents=True, exist_ok=True)
    name = pipeline.pipeline_spec.pipeline_info.name
    before = set(pipeline_root.glob(f"{name}-*"))
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(pipeline_root),
        raise_on_error=True,
    )
    if quiet:
        logging.getLogger().setLevel(logging.WARNING)
    # The steps name the Vertex image; here they run in this very environment on purpose.
    warnings.filterwarnings("ignore", message=".*non-Python base image.*", category=RuntimeWarning)
    failed_step = None
    try:
        pipeline(**(arguments or {}))
    except RuntimeError as exc:
        failed_step = _failed_step(str(exc)) or "?"
    run_dir = _newest_run_dir(pipeline_root, name, before)
    steps = tuple(
        _outcome((run_dir or pipeline_root) / task, failed_step=failed_step)
        for task in step_order(pipeline)
    )
    return LocalRun(run_dir=run_dir, succeeded=failed_step is None, steps=steps)
