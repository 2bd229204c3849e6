"""Evaluation sharded across processes: two torchrun processes (gloo, CPU) write the same
predictions and scores as one, through the evaluate step as the pipeline runs it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from llm_pipeline.config.errors import ConfigError
from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation.processes import evaluation_processes
from llm_pipeline.steps.evaluate import run_evaluate

from . import generate_fixtures as fixtures

tiny_t5_dir = fixtures.tiny_t5_dir
eval_dataset_dir = fixtures.eval_dataset_dir

#: Odd, so that the two shards are uneven.
ROWS = 25


class Sink(SimpleNamespace):
    """What the step needs of KFP's Metrics artifact."""

    def log_metric(self, name: str, value: float) -> None:
        self.values[name] = value


def evaluate_step(
    tmp_path: Path, model: Path, dataset: Path, processes: int
) -> tuple[list[dict[str, object]], dict[str, float], Path]:
    out = tmp_path / f"processes-{processes}"
    section = EvaluateConfig(
        max_samples=ROWS, batch_size=4, bootstrap_samples=100, seed=1, processes=processes
    )
    metrics = Sink(path=str(out / "metrics"), values={})
    run_evaluate(
        evaluate=section.model_dump_json(),
        model=SimpleNamespace(path=str(model)),
        dataset=SimpleNamespace(path=str(dataset)),
        metrics=metrics,
        report=SimpleNamespace(path=str(out / "report.html")),
        predictions=SimpleNamespace(path=str(out / "predictions")),
    )
    rows = [
        json.loads(line)
        for line in (out / "predictions" / "predictions.jsonl").read_text().splitlines()
    ]
    return rows, metrics.values, out


@pytest.mark.slow
def test_two_processes_write_what_one_writes(
    tiny_t5_dir: Path, eval_dataset_dir: Path, tmp_path: Path
) -> None:
    one, one_metrics, _ = evaluate_step(tmp_path, tiny_t5_dir, eval_dataset_dir, 1)
    two, two_metrics, out = evaluate_step(tmp_path, tiny_t5_dir, eval_dataset_dir, 2)
    assert len(one) == ROWS
    assert [row["index"] for row in two] == list(range(ROWS))
    assert [row["prediction"] for row in two] == [row["prediction"] for row in one]
    timings = {"seconds", "generation_seconds"}
    assert {k: v for k, v in two_metrics.items() if k not in timings} == {
        k: v for k, v in one_metrics.items() if k not in timings
    }
    assert "<table" in (out / "report.html").read_text()
    recorded = json.loads((out / "predictions" / "llm_pipeline_config.json").read_text())
    assert recorded["processes"] == "2" and recorded["split"] == "validation"


def test_the_process_count_defaults_to_the_gpus() -> None:
    assert evaluation_processes(EvaluateConfig()) == 1  # this machine has no GPU
    assert evaluation_processes(EvaluateConfig(processes=2)) == 2
    with pytest.raises(ConfigError, match=r"evaluate\.processes|processes"):
        EvaluateConfig.from_component('{"processes": 0}')


@pytest.mark.slow
def test_a_failure_in_the_processes_names_rank_0s_reason(
    eval_dataset_dir: Path, tmp_path: Path
) -> None:
    from llm_pipeline.evaluation.errors import EvaluationError
    from llm_pipeline.evaluation.processes import evaluate_in_processes

    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    with pytest.raises(EvaluationError) as caught:
        evaluate_in_processes(
            model_dir=not_a_model,
            dataset_dir=eval_dataset_dir,
            config=EvaluateConfig(max_samples=3, processes=2),
            output_dir=tmp_path / "out",
        )
    message = str(caught.value)
    assert message.startswith("evaluation in 2 processes failed (launcher exit code 1): ")
    assert str(not_a_model) in message
    assert not (tmp_path / "out").exists()  # nothing half-written
