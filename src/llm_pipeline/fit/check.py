"""The fit check: each place a config runs a model, its estimate against its machine.

`check_fit` returns every row of the table; `enforce` refuses a report with problems as a
ConfigError (exit 2), each problem naming the setting, what it needs, and the largest
value that fits or what else would.
"""

from __future__ import annotations

from llm_pipeline.config import ConfigError, PipelineConfig
from llm_pipeline.fit.generation import evaluation_rows, serving_rows
from llm_pipeline.fit.machines import UnknownMachine
from llm_pipeline.fit.places import Target, local_gpu_problems
from llm_pipeline.fit.rows import FitReport, Row
from llm_pipeline.fit.shapes import ShapeUnavailable, model_shape
from llm_pipeline.fit.training import precision_problems, stage_choice, training_rows
from llm_pipeline.registry.base import RegistryError, RegistryUnreachable
from llm_pipeline.registry.start import resolve_start
from llm_pipeline.tasks import get_task

#: The flag that runs a config the check refuses; every refusal names it.
SKIP_FLAG = "--skip-fit-check"


def check_fit(config: PipelineConfig, *, target: Target) -> FitReport:
    """Estimate every place of `config` against its machine (`target`: where it runs)."""
    report = FitReport(other_problems=local_gpu_problems(config, target))
    try:
        # A `registry:` source is the version's files, read as the run will read them.
        config = resolve_start(config)
    except RegistryUnreachable as exc:  # e.g. compiling for Vertex with no credentials
        report.skipped.append(f"fit check skipped (the starting version cannot be read): {exc}")
        return report
    except RegistryError as exc:  # the registry answered: no such model or version
        report.other_problems.append(str(exc))
        return report
    task = get_task(config.task)
    labels, labels_note = task.fit_labels(config)
    try:
        shape = model_shape(
            config.model,
            kind=task.model_kind,
            terms=task.fit_terms(),
            lora=config.train.lora,
            labels=labels,
        )
    except ShapeUnavailable as exc:
        report.skipped.append(f"fit check skipped (the model's shape is unknown): {exc}")
        return report
    if labels_note:
        report.notes.append(labels_note)
    if shape.source_note:
        report.notes.append(shape.source_note)
    for place, rows_of in (
        ("finetune", training_rows),
        ("evaluate", evaluation_rows),
        ("serve", serving_rows),
    ):
        try:
            if place == "finetune":
                report.other_problems += precision_problems(config, target)
                choice = stage_choice(config, shape, target)
                report.notes.append(f"ZeRO stage: {choice[0].describe()}")
                report.rows += training_rows(config, shape, target, choice)
                continue
            report.rows += rows_of(config, shape, target)
        except UnknownMachine as exc:
            report.other_problems.append(
                f"{exc} (the fit check cannot estimate {place}; machine types it knows: "
                "fit/machines.py)"
            )
    return report


def enforce(report: FitReport) -> None:
    """Raise ConfigError (exit 2) listing every problem, with the way past a wrong estimate."""
    if report.problems:
        raise ConfigError(
            report.problems,
            source=f"the fit check (if its estimate is wrong for your setup, {SKIP_FLAG} "
            "runs the config anyway)",
        )


__all__ = ["SKIP_FLAG", "FitReport", "Row", "check_fit", "enforce"]
