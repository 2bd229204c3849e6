"""The deploy step against a real local registry and the real prediction server.

Traffic moves only after the new version answered a prediction from the evaluation data;
a version that cannot serve, or an endpoint that changed since the gate, leaves the
endpoint exactly as it was and fails the step with the reason.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from kfp.dsl import Markdown, Metrics

from llm_pipeline import components
from llm_pipeline.config import DataConfig, DeployConfig, EvaluateConfig, VertexConfig
from llm_pipeline.progress import parse_status
from llm_pipeline.registry import EVALUATION_DATA_LABEL
from llm_pipeline.registry.local import LocalRegistry
from llm_pipeline.steps.deploy import generation_defaults

pytestmark = pytest.mark.slow

ENDPOINT = "summarizer-endpoint"
#: The fingerprint of the evaluation that scored the model (`evaluation.fingerprint`).
EVALUATED_ON = "0123456789abcdef" * 2


@pytest.fixture(scope="module")
def evaluation_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A preprocess-shaped dataset: the probe document comes from its test split."""
    import datasets

    rows = {
        "document": ["#Person1#: Shall we meet at noon? #Person2#: Yes, at the cafe."],
        "summary": ["They meet at noon."],
        "input_ids": [[101, 2000, 102]],
    }
    folder = tmp_path_factory.mktemp("tokenized")
    split = datasets.Dataset.from_dict(rows)
    datasets.DatasetDict({"train": split, "validation": split, "test": split}).save_to_disk(
        str(folder)
    )
    return folder


def deploy_step(
    tmp_path: Path,
    registry_dir: Path,
    model_dir: Path,
    data: Path,
    *,
    gate_served: str = "",
    engine: str = "auto",
) -> Path:
    """Run the step as the pipeline does; returns its task folder."""
    task = tmp_path / f"deploy-{len(list(tmp_path.glob('deploy-*')))}"
    metrics = Metrics(uri=str(tmp_path / "evaluate-metrics"))
    metrics.log_metric("rougeLsum", 31.5)
    components.deploy.python_func(
        task="summarization",
        deploy=DeployConfig(
            registry_dir=str(registry_dir),
            model_display_name="summarizer",
            health_timeout_s=120,
            engine=engine,
        ).model_dump_json(),
        vertex=VertexConfig().model_dump_json(),
        data=DataConfig(dataset="unused", max_source_length=64).model_dump_json(),
        evaluate=EvaluateConfig(
            max_new_tokens=12, num_beams=2, bootstrap_samples=0
        ).model_dump_json(),
        run="run-under-test",
        gate_served=gate_served,
        evaluation_data=EVALUATED_ON,
        model=SimpleNamespace(path=str(model_dir), uri=str(model_dir), metadata={}),
        metrics=metrics,
        dataset=SimpleNamespace(path=str(data)),
        report=Markdown(uri=str(task / "report")),
        deployment=Metrics(uri=str(task / "deployment")),
        version=str(task / "version"),
        endpoint=str(task / "endpoint"),
    )
    return task


def served_by_another_run(registry_dir: Path, model_dir: Path) -> None:
    """summarizer@1 registered and given all of the endpoint's traffic through the registry
    itself, as an earlier run's deploy step leaves them: the tests that start from a served
    version skip that step's server check (seconds), which the test above makes."""
    registry = LocalRegistry(registry_dir)
    version = registry.register(
        model="summarizer",
        model_dir=str(model_dir),
        metrics={"rougeLsum": 31.5},
        run="run-under-test",
        labels={EVALUATION_DATA_LABEL: EVALUATED_ON},
        serving_env={"LLM_PIPELINE_SERVE_TASK": "summarization"},
    )
    registry.deploy(version, ENDPOINT)
    assert version.ref == "summarizer@1"


def test_a_healthy_version_is_registered_probed_and_takes_the_traffic(
    tmp_path: Path,
    tiny_model_dir: Path,
    evaluation_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry_dir = tmp_path / "registry"

    task = deploy_step(tmp_path, registry_dir, tiny_model_dir, evaluation_data)

    # The console's lines: the wait for the server (most of the step) is said, with its limit.
    lines = [parse_status(line) for line in capsys.readouterr().out.splitlines()]
    form = tiny_model_dir / "engine" / "ctranslate2-int8"
    assert [line for line in lines if line] == [
        "engine: ctranslate2 int8 (CTranslate2 converts T5ForConditionalGeneration and runs it "
        "on a CPU)",
        f"its CTranslate2 int8 form, checked: {form}",
        f"registered summarizer@1 ({registry_dir / 'models' / 'summarizer' / '1' / 'model'})",
        "starting the prediction server on summarizer@1 to check it: its health route (up to "
        "2 min 00 s), then 1 probe prediction(s)",
        f"{ENDPOINT} serves summarizer@1 with 100% of traffic (before: nothing; retired: none)",
    ]

    assert (task / "version").read_text() == "summarizer@1"
    assert (task / "endpoint").read_text() == ENDPOINT
    served = LocalRegistry(registry_dir).served_version(ENDPOINT)
    assert served is not None and served.ref == "summarizer@1"
    assert served.metrics == {"rougeLsum": 31.5} and served.run == "run-under-test"
    # What the metrics were scored on, so that a later gate compares like with like.
    assert served.labels == {EVALUATION_DATA_LABEL: EVALUATED_ON}
    assert served.serving_env["LLM_PIPELINE_SERVE_MAX_INPUT_TOKENS"] == "64"
    assert served.serving_env["LLM_PIPELINE_SERVE_TASK"] == "summarization"
    # The engine it is served with, and its form, travel with the version.
    assert served.serving_env["LLM_PIPELINE_SERVE_ENGINE"] == "ctranslate2"
    assert served.serving_env["LLM_PIPELINE_SERVE_COMPUTE_TYPE"] == "int8"
    assert (Path(served.uri) / "engine" / "ctranslate2-int8" / "model.bin").is_file()
    # The endpoint generates as the evaluation did.
    assert json.loads(served.serving_env["LLM_PIPELINE_SERVE_PARAMETERS"]) == {
        "max_new_tokens": 12,
        "num_beams": 2,
    }
    report = (task / "report").read_text()
    assert "Shall we meet at noon" in report  # the probe document and what the model said
    prediction = report.split("**Prediction:**", 1)[1].strip()
    assert prediction, report

    # The second version replaces the first once healthy, and the first is retired.
    task = deploy_step(
        tmp_path, registry_dir, tiny_model_dir, evaluation_data, gate_served="summarizer@1"
    )
    endpoint = LocalRegistry(registry_dir).endpoint(ENDPOINT)
    assert [(d.version.ref, d.traffic) for d in endpoint.deployed] == [("summarizer@2", 100)]
    assert "before: summarizer@1" in (task / "report").read_text()


def test_a_version_that_cannot_serve_leaves_traffic_where_it_was(
    tmp_path: Path,
    tiny_model_dir: Path,
    evaluation_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry_dir = tmp_path / "registry"
    served_by_another_run(registry_dir, tiny_model_dir)
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")

    with pytest.raises(SystemExit) as exited:
        deploy_step(
            tmp_path,
            registry_dir,
            broken,
            evaluation_data,
            gate_served="summarizer@1",
            engine="transformers",
        )

    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "version summarizer@2 failed its check" in err
    endpoint = LocalRegistry(registry_dir).endpoint(ENDPOINT)
    assert [(d.version.ref, d.traffic) for d in endpoint.deployed] == [("summarizer@1", 100)]

    # Its engine's conversion fails first, in one line, and nothing is registered.
    with pytest.raises(SystemExit) as exited:
        deploy_step(tmp_path, registry_dir, broken, evaluation_data, gate_served="summarizer@1")
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert f"model folder {broken}: CTranslate2 cannot convert it: " in err
    assert "Traceback" not in err
    assert [v.ref for v in LocalRegistry(registry_dir).versions("summarizer")][-1] == "summarizer@2"


def test_an_endpoint_that_changed_since_the_gate_is_left_alone(
    tmp_path: Path,
    tiny_model_dir: Path,
    evaluation_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry_dir = tmp_path / "registry"
    served_by_another_run(registry_dir, tiny_model_dir)

    # The gate of this run saw an empty endpoint; another run deployed summarizer@1 since.
    with pytest.raises(SystemExit):
        deploy_step(tmp_path, registry_dir, tiny_model_dir, evaluation_data, gate_served="")

    err = capsys.readouterr().err
    assert "now serves summarizer@1, but the gate compared with nothing" in err
    registry = LocalRegistry(registry_dir)
    assert [v.ref for v in registry.versions("summarizer")] == ["summarizer@1"]
    assert registry.served_version(ENDPOINT).ref == "summarizer@1"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("task", "evaluate", "defaults"),
    [
        (
            "summarization",
            {"max_new_tokens": 12, "num_beams": 2},
            {"max_new_tokens": 12, "num_beams": 2},
        ),
        # Greedy evaluation: the server is greedy too, whatever temperature was written down.
        (
            "instruction_tuning",
            {"num_beams": 1, "max_new_tokens": 64, "top_p": 0.9, "stop": ["\n\n"]},
            {"max_new_tokens": 64, "stop": ["\n\n"]},
        ),
        (
            "instruction_tuning",
            {"do_sample": True, "top_p": 0.9},
            {"temperature": 1.0, "top_p": 0.9},
        ),
        ("instruction_tuning", {"do_sample": True, "temperature": 0.7}, {"temperature": 0.7}),
    ],
)
def test_the_server_generates_by_default_as_the_evaluation_did(
    task: str, evaluate: dict[str, object], defaults: dict[str, object]
) -> None:
    settings = EvaluateConfig.model_validate({"bootstrap_samples": 0, **evaluate})
    assert generation_defaults(settings, task=task) == defaults
