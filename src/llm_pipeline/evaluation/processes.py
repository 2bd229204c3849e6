"""Evaluate on every GPU of the machine: one torchrun process per GPU, generation sharded.

Generation is nearly all of an evaluation's time, and it parallelises perfectly: T5-XXL on
CNN/DailyMail's 11,490 test articles on one GPU of a 16-GPU node would leave fifteen idle.
The step calls `evaluate_in_processes`; with one process it evaluates in its own process,
with several it starts `python -m llm_pipeline.evaluation.evaluate` under torchrun (the
launcher training uses) and reads back what rank 0 wrote.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation.errors import EvaluationError
from llm_pipeline.evaluation.evaluate import (
    METRICS_FILE,
    PREDICTIONS_FILE,
    REPORT_FILE,
    evaluate_model,
)
from llm_pipeline.evaluation.examples import evaluation_split
from llm_pipeline.storage import to_uri
from llm_pipeline.train.cluster import detect_cluster
from llm_pipeline.train.launch import torchrun_command

__all__ = ["EvaluationOutputs", "evaluate_in_processes", "evaluation_processes"]

EVALUATE_MODULE = "llm_pipeline.evaluation.evaluate"
#: Lines of the launcher's output repeated in the error when it fails.
_OUTPUT_TAIL_LINES = 40
#: How `llm_pipeline.evaluation.evaluate.main` reports a user's mistake.
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
        return self.output_dir / REPORT_FILE

    @property
    def predictions_path(self) -> Path:
        return self.output_dir / PREDICTIONS_FILE


def evaluation_processes(config: EvaluateConfig) -> int:
    """`evaluate.processes`, else one per visible GPU, else 1 on a CPU-only machine."""
    if config.processes is not None:
        return config.processes
    return max(torch.cuda.device_count(), 1)


def evaluate_in_processes(
    *,
    model_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
    config: EvaluateConfig,
    output_dir: str | os.PathLike[str],
) -> EvaluationOutputs:
    """Evaluate with `evaluation_processes(config)` processes; the same outputs either way.

    Raises EvaluationError with the reason (rank 0's message, or the launcher's last lines).
    """
    processes = evaluation_processes(config)
    if processes == 1:
        result = evaluate_model(
            model_dir=model_dir, dataset_dir=dataset_dir, config=config, output_dir=output_dir
        )
        return EvaluationOutputs(result.split, result.metrics, result.output_dir, processes)
    from llm_pipeline.data.saved import load_saved_dataset

    splits = list(load_saved_dataset(dataset_dir, made_by="preprocess", error=EvaluationError))
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
        ],
    )
    print(f"evaluate: generating in {processes} processes (torchrun)", flush=True)
    _run(command, processes)
    folder = Path(to_uri(str(output_dir)))
    metrics = json.loads((folder / METRICS_FILE).read_text())
    return EvaluationOutputs(evaluation_split(splits, None), metrics, folder, processes)


def _run(command: list[str], processes: int) -> None:
    """Run the launcher, echoing its output; EvaluationError with its reason on failure."""
    tail: collections.deque[str] = collections.deque(maxlen=_OUTPUT_TAIL_LINES)
    reported: list[str] = []  # what a rank said of a user's mistake, before torchrun's report
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            tail.append(line)
            if _ERROR_MARK in line and not reported:
                reported.append(line.split(_ERROR_MARK, 1)[1].strip())
        code = process.wait()
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait()
    if code == 0:
        return
    reason = reported[0] if reported else "its last lines:\n" + "".join(tail).rstrip()
    raise EvaluationError(
        f"evaluation in {processes} processes failed (launcher exit code {code}): {reason}"
    )
