"""configs/classify_local.json under KFP's local runner: text classification end to end on
real text (which installed package a docstring comes from), deployed to the local endpoint,
whose server then answers texts with labels and scores. A run parameter reaches the gate
(tests/pipelines/test_local_run.py checks others reach finetune)."""

import json
from pathlib import Path

import pytest

from llm_pipeline.config import load_config
from llm_pipeline.local import LocalRun, run_local
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.registry.local.registry import LocalRegistry
from llm_pipeline.serve.server_process import start_server

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "classify_local.json"
#: 4 training steps of 16 rows: the test checks that the run trains, ships and serves, not
#: how well (the scores are only checked to be in range, beside their baselines).
SMALL = [
    'data.max_samples={"train": 64, "validation": 8, "test": 16}',
    "data.max_length=48",
    "evaluate.bootstrap_samples=50",
    "train.logging_steps=2",
    "train.eval_steps=4",
    "train.save_steps=4",
]


@pytest.fixture(scope="module")
def registry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("classify-registry")


@pytest.fixture(scope="module")
def classify_run(
    tmp_path_factory: pytest.TempPathFactory, registry_dir: Path, installed_docstrings: Path
) -> LocalRun:
    config = load_config(CONFIG, [*SMALL, f"deploy.registry_dir={registry_dir}"]).config
    assert config.data.dataset == "builtin:docstring_packages"  # the demo's own data
    # A run parameter set as in the Vertex "Create run" form (the config's gate compares
    # macro_f1): it must reach the gate, through configure's resolved config as every
    # parameter does.
    return run_local(
        build_pipeline(config),
        pipeline_root=tmp_path_factory.mktemp("classify-runs"),
        arguments={"gate_metric": "accuracy"},
    )


@pytest.mark.slow
def test_text_classification_runs_end_to_end_and_its_endpoint_answers_labels(
    classify_run: LocalRun, registry_dir: Path
) -> None:
    assert classify_run.succeeded, classify_run.steps
    steps = {step.name: step for step in classify_run.steps}
    assert list(steps) == [
        "configure",
        "download",
        "preprocess",
        "finetune",
        "evaluate",
        "should-deploy",
        "deploy",
    ]
    reason = steps["should-deploy"].outputs["reason"]
    assert reason.startswith("accuracy ") and reason.endswith("deploying the first version")
    metrics = steps["evaluate"].metrics
    for name in ("macro_f1", "accuracy", "weighted_f1"):
        assert 0 <= metrics[name] <= 1 and f"base_{name}" in metrics, sorted(metrics)
        assert metrics[f"{name}_low"] <= metrics[name] <= metrics[f"{name}_high"]
    assert "majority_accuracy" in metrics and "majority_macro_f1" in metrics
    assert metrics["samples"] == 16

    evaluate = steps["evaluate"].outputs
    report = Path(evaluate["report"]).read_text()
    assert "confusion" in report.lower() and "<svg" in report

    shipped = load_config(CONFIG).config.deploy
    served = LocalRegistry(registry_dir).served_version(shipped.endpoint_name())
    assert served is not None and served.ref == f"{shipped.model_display_name}@1"
    assert served.metrics["macro_f1"] == metrics["macro_f1"]
    labels = json.loads(
        (Path(steps["preprocess"].outputs["tokenized"]) / "preprocess.json").read_text()
    )["label_set"]["names"]
    assert len(labels) == 8

    with start_server(served.uri, env=served.serving_env) as server:
        one, ranked = server.predict(
            [
                "Return the inverse of a square matrix, computed by LU decomposition.",
                {"text": "Read a comma-separated file into a table of rows and columns."},
            ],
            {"top_k": 3},
        )
        (single,) = server.predict(["Compute the gradient of a tensor in a graph."])
    for answer in (one, ranked):
        assert [entry["label"] in labels for entry in answer] == [True] * 3
        scores = [entry["score"] for entry in answer]
        assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 + 1e-6
    assert single["label"] in labels and 0 < single["score"] <= 1
