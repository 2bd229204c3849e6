"""Evaluate on every GPU of the machine: one torchrun process per GPU, generation sharded.

Generation is nearly all of an evaluation's time, and it parallelises perfectly: T5-XXL on
CNN/DailyMail's 11,490 test articles on one GPU of a 16-GPU node would leave fifteen idle.
The step calls `evaluate_in_processes`; with one process it evaluates in its own process,
with several it starts `python -m llm_pipeline.evaluation.evaluate_model` under torchrun, run
and reported as training runs and reports it, and reads back what rank 0 wrote.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.evaluate_model import (
    EVALUATION_REPORT_FILE,
    METRICS_FILE,
    evaluate_model,
)
from llm_pipeline.evaluation.examples import evaluation_split
from llm_pipeline.launch.cluster import detect_cluster
from llm_pipeline.launch.commands import torchrun_command
from llm_pipeline.launch.failures import first_failure, is_out_of_memory, tail_lines
from llm_pipeline.launch.supervisor import run_launcher
from llm_pipeline.output_files import Step
from llm_pipeline.progress import status
from llm_pipeline.storage import check_output_complete, to_uri
from llm_pipeline.tasks import DEFAULT_TASK

__all__ = ["EvaluationOutputs", "evaluate_in_processes", "evaluation_processes"]

EVALUATE_MODULE = "llm_pipeline.evaluation.evaluate_model"
#: How `llm_pipeline.evaluation.evaluate_model.main` reports a user's mistake.
_ERROR_MARK = "ERROR: evaluate failed:"


@dataclass(frozen=True)
class EvaluationOutputs:
    """What the step publishes: the split scored, the flat metrics, and the folder with
    predictions.jsonl, metrics.json and report.html."""

    split: str
    metrics: dict[str, float]
    output_dir: Path
    processes: int

    @property
    def report_path(self) -> Path:
        return self.output_dir / EVALUATION_REPORT_FILE


def evaluation_processes(config: EvaluateConfig, *, gpus: int | None = None) -> int:
    """`evaluate.processes`, else one per GPU (`gpus`, default: those this machine sees), else
    1 on a CPU-only machine.

    Raises EvaluationError for more processes than GPUs: each rank takes the GPU its local
    rank names, so an extra one would find none.
    """
    gpus = torch.cuda.device_count() if gpus is None else gpus
    if config.processes is None:
        return max(gpus, 1)
    if gpus and config.processes > gpus:
        raise EvaluationError(
            f"evaluate.processes: {config.processes}, but this machine has {gpus} GPU(s); "
            f"one process per GPU at most: set it to {gpus} or less, or null for all of them"
        )
    return config.processes


def evaluate_in_processes(
    *,
    model_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
    config: EvaluateConfig,
    output_dir: str | os.PathLike[str],
    env: Mapping[str, str] = os.environ,
    task: str = DEFAULT_TASK,
) -> EvaluationOutputs:
    """Evaluate with `evaluation_processes(config)` processes; the same outputs either way.

    `task` (a `tasks.TASKS` name) says what the model does and how it is scored. Several
    processes run under torchrun with `env` (default: this process's environment).
    Raises EvaluationError with the reason: rank 0's message for a user's mistake, else the
    rank that failed and its last output.
    """
    check_output_complete(model_dir, made_by=Step.FINETUNE, error=EvaluationError)
    processes = evaluation_processes(config)
    if processes == 1:
        result = evaluate_model(
            model_dir=model_dir,
            dataset_dir=dataset_dir,
            config=config,
            output_dir=output_dir,
            task=task,
        )
        return EvaluationOutputs(result.split, result.metrics, result.output_dir, processes)
    from llm_pipeline.data.saved import load_saved_dataset

    splits = list(load_saved_dataset(dataset_dir, made_by=Step.PREPROCESS, error=EvaluationError))
    # One machine, whatever the environment says about a training cluster: evaluation runs
    # on a single node (`--standalone`, a free port).
    command = torchrun_command(
        detect_cluster({}, procs_per_node=processes),
        module=EVALUATE_MODULE,
        script_args=[
            "--model",
            str(model_dir),
            "--dataset",
            str(dataset_dir),
            "--output",
            str(output_dir),
            "--config",
            config.model_dump_json(),
            "--task",
            task,
        ],
    )
    status(f"generating in {processes} processes (torchrun)")
    with tempfile.TemporaryDirectory(prefix="llm-evaluate-") as work:
        log_dir = Path(work) / "logs"
        ended = run_launcher(command, env=env, log_dir=log_dir)
        if ended.code != 0:
            reason = _failure_reason(ended.output_tail, log_dir)
            raise EvaluationError(
                f"evaluation in {processes} processes failed (launcher exit code {ended.code}): "
                + reason
            )
    check_output_complete(output_dir, made_by=Step.EVALUATE, error=EvaluationError)
    folder = Path(to_uri(str(output_dir)))
    metrics = json.loads((folder / METRICS_FILE).read_text())
    return EvaluationOutputs(evaluation_split(splits, None), metrics, folder, processes)


def _failure_reason(output: str, log_dir: Path) -> str:
    """What a rank said of a user's mistake (as one process would say it), else the rank that
    failed first and why, as training names it."""
    for line in output.splitlines():
        if _ERROR_MARK in line:
            return line.split(_ERROR_MARK, 1)[1].strip()
    failure = first_failure(log_dir=log_dir, launcher_output=output)
    if failure is None:
        return "no rank reported an error; the launcher's last lines:\n" + tail_lines(output)
    if is_out_of_memory(failure.detail):
        return (
            f"rank {failure.local_rank} ran out of GPU memory: {failure.detail}\nTo fit: "
            "lower evaluate.batch_size (documents per process), evaluate.num_beams or "
            "evaluate.max_new_tokens."
        )
    return f"rank {failure.local_rank} {failure.how}:\n{failure.detail}"
