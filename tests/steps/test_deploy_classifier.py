"""The deploy step ships a classifier as it ships the other kinds of model: the probe sends
held-out texts as a client would, and labels with scores (objects, not texts) are answers,
an empty list of labels included (a multi-label model may predict none for a text)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from kfp.dsl import Markdown, Metrics

from llm_pipeline import components
from llm_pipeline.config import DataConfig, DeployConfig, EvaluateConfig, VertexConfig
from llm_pipeline.registry import prediction_text
from llm_pipeline.registry.local import LocalRegistry

pytestmark = pytest.mark.slow

ENDPOINT = "issue-labels"
#: Held-out rows: the multi-label fixture scores no label of the first at its threshold
#: (0.8), and "question" for the second.
TEXTS = [
    "How do I read a gzip-compressed file line by line?",
    "Please add an option to write the report as JSON.",
]


@pytest.fixture(scope="module")
def classification_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A preprocess-shaped classification dataset: the probe texts come from its test split."""
    import datasets

    rows = {
        "text": TEXTS,
        "label": [[], ["question"]],
        "input_ids": [[101, 2000, 102], [101, 2001, 102]],
        "attention_mask": [[1, 1, 1], [1, 1, 1]],
        "labels": [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]],
    }
    folder = tmp_path_factory.mktemp("classification")
    split = datasets.Dataset.from_dict(rows)
    datasets.DatasetDict({"train": split, "validation": split, "test": split}).save_to_disk(
        str(folder)
    )
    return folder


def test_a_classifier_is_probed_with_texts_and_its_labels_are_answers(
    tmp_path: Path, multi_label_classifier_dir: Path, classification_data: Path
) -> None:
    registry_dir = tmp_path / "registry"
    metrics = Metrics(uri=str(tmp_path / "evaluate-metrics"))
    metrics.log_metric("macro_f1", 0.5)
    task = tmp_path / "deploy"
    components.deploy.python_func(
        task="text_classification",
        deploy=DeployConfig(
            registry_dir=str(registry_dir),
            model_display_name="issue-labeller",
            endpoint_display_name=ENDPOINT,
            health_timeout_s=120,
            probe_instances=2,
        ).model_dump_json(),
        vertex=VertexConfig().model_dump_json(),
        data=DataConfig(dataset="unused", max_length=32).model_dump_json(),
        evaluate=EvaluateConfig(bootstrap_samples=0).model_dump_json(),
        run="run-under-test",
        gate_served="",
        evaluation_data="f" * 32,
        model=SimpleNamespace(
            path=str(multi_label_classifier_dir),
            uri=str(multi_label_classifier_dir),
            metadata={},
        ),
        metrics=metrics,
        dataset=SimpleNamespace(path=str(classification_data)),
        report=Markdown(uri=str(task / "report")),
        deployment=Metrics(uri=str(task / "deployment")),
        version=str(task / "version"),
        endpoint=str(task / "endpoint"),
    )

    served = LocalRegistry(registry_dir).served_version(ENDPOINT)
    assert served is not None and served.ref == "issue-labeller@1"
    assert served.serving_env["LLM_PIPELINE_SERVE_TASK"] == "text_classification"
    assert served.serving_env["LLM_PIPELINE_SERVE_MAX_INPUT_TOKENS"] == "32"
    assert "LLM_PIPELINE_SERVE_PARAMETERS" not in served.serving_env  # no generation defaults
    report = (task / "report").read_text()
    assert f"**Probe instance:** {TEXTS[0]}" in report
    # The first probe's answer: the labels reaching the threshold, here none.
    assert report.split("**Prediction:**", 1)[1].strip() == "[]"


def test_a_prediction_is_an_answer_unless_null_or_blank() -> None:
    answer = {"label": "question", "score": 0.9}
    assert json.loads(prediction_text(answer)) == answer
    assert prediction_text([]) == "[]" and prediction_text({}) == "{}"
    assert prediction_text("a summary") == "a summary"
    assert not prediction_text(None).strip() and not prediction_text("  ").strip()
