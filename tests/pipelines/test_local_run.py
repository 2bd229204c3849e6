"""The pipeline under KFP's local runner, on real text (the tests' docstring pairs, built
offline: nothing beside the checkout), checked on disk."""

import json
import shlex
from pathlib import Path

import pytest
from datasets import load_from_disk

from llm_pipeline.config import load_config
from llm_pipeline.local import LocalRun, run_local
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.registry import EVALUATION_DATA_LABEL

from ..chromium import render_in_chromium
from ..pipeline_cli import run_pipeline

REPO = Path(__file__).resolve().parents[2]
#: The config as shipped: the names the run registers under, the baseline it scores.
SHIPPED = load_config(REPO / "configs" / "local.json").config

SMALL = [
    'data.max_samples={"train": 32, "validation": 16, "test": 16}',
    "data.max_source_length=64",  # not the config's 48: the override must reach preprocess
    "data.max_target_length=32",
    "evaluate.max_samples=16",
    "evaluate.max_new_tokens=16",
    "train.epochs=1",
    "train.logging_steps=4",  # the first run is 8 steps: log a training loss within them
]
#: What the second run changes besides the deploy policy, to cost seconds: two training
#: steps and a short evaluation without the un-fine-tuned model (the first run's tests check
#: those scores). None of it is read by download or preprocess, so both are still reused.
SECOND_RUN = ["train.max_steps=2", "evaluate.max_samples=4", "evaluate.score_base_model=false"]


MODEL = SHIPPED.deploy.model_display_name
ENDPOINT = SHIPPED.deploy.endpoint_name()
LEAD = SHIPPED.evaluate.lead_k
#: Pipeline parameters the first run sets (the config says 8 and 3e-4).
RUN_ARGUMENTS = {"per_device_batch_size": 4, "learning_rate": 1e-4}


@pytest.fixture(scope="module")
def registry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("registry")


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pipeline root both runs share, as two `make demo` runs share `runs/`."""
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def local_run(runs_root: Path, registry_dir: Path, installed_docstrings: Path) -> LocalRun:
    """configs/local.json end to end as `make demo` runs it (the docstrings of the installed
    packages, a MiniLM encoder-decoder, one CPU process), smaller, shipping to a registry of
    its own. Two pipeline parameters are set for the run, as a person does in the Vertex
    "Create run" form: they must reach finetune."""
    overrides = [*SMALL, f"deploy.registry_dir={registry_dir}"]
    config = load_config(REPO / "configs" / "local.json", overrides).config
    assert config.data.dataset == "builtin:docstrings"  # the demo's own data, nothing else
    return run_local(build_pipeline(config), pipeline_root=runs_root, arguments=RUN_ARGUMENTS)


@pytest.mark.slow
def test_every_step_succeeds_in_order(local_run: LocalRun) -> None:
    assert local_run.succeeded, local_run.steps
    assert [step.name for step in local_run.steps] == [
        "configure",
        "download",
        "preprocess",
        "finetune",
        "evaluate",
        "should-deploy",
        "deploy",
    ]
    assert local_run.run_dir is not None and local_run.run_dir.is_dir()


@pytest.mark.slow
def test_download_then_preprocess_writes_artifacts(local_run: LocalRun) -> None:
    steps = {step.name: step for step in local_run.steps}

    raw = load_from_disk(steps["download"].outputs["dataset"])
    assert {split: raw[split].num_rows for split in raw} == {
        "train": 32,
        "validation": 16,
        "test": 16,
    }
    assert raw["train"].column_names == ["document", "summary"]
    assert steps["download"].metrics == {
        "rows_train": 32.0,
        "rows_validation": 16.0,
        "rows_test": 16.0,
    }

    tokenized_dir = Path(steps["preprocess"].outputs["tokenized"])
    tokenized = load_from_disk(str(tokenized_dir))
    row = tokenized["train"][0]
    assert {"input_ids", "attention_mask", "labels"} <= set(tokenized["train"].column_names)
    assert 0 < len(row["input_ids"]) <= 64 and 0 < len(row["labels"]) <= 32
    resolved = json.loads((tokenized_dir / "llm_pipeline_config.json").read_text())
    assert resolved["data"]["max_source_length"] == 64
    assert any(name.startswith("train_") for name in steps["preprocess"].metrics)


@pytest.mark.slow
def test_finetune_writes_a_model_that_reloads(local_run: LocalRun) -> None:
    from transformers import AutoTokenizer, EncoderDecoderModel

    steps = {step.name: step for step in local_run.steps}
    model_dir = Path(steps["finetune"].outputs["trained_model"])
    assert {"config.json", "model.safetensors", "generation_config.json"} <= {
        path.name for path in model_dir.iterdir()
    }
    model = EncoderDecoderModel.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    inputs = tokenizer(["#Person1#: Hello, how are you?"], return_tensors="pt")
    generated = model.generate(**inputs, max_new_tokens=5)
    assert generated.shape[0] == 1
    metrics = steps["finetune"].metrics
    # The run's parameters reached the trainer: 32 rows / (4 per process x 1 process), where
    # the config's 8 per process would take 4 steps.
    assert metrics["global_step"] == 8
    resolved = json.loads((model_dir / "llm_pipeline_config.json").read_text())
    assert resolved["train"]["per_device_batch_size"] == 4
    # train.zero_stage "auto" became the plain Trainer on this CPU, and the step says why.
    assert metrics["zero_stage"] == 0 and resolved["train"]["zero_stage"] == 0
    stage = steps["finetune"].details["zero_stage"]
    assert stage.startswith("0 (auto: no DeepSpeed: the whole training state, ")
    assert resolved["train"]["learning_rate"] == 1e-4
    run_config = json.loads(Path(steps["configure"].outputs["resolved"]).read_text())
    assert run_config["train"]["per_device_batch_size"] == 4
    assert metrics["train_loss"] > 0 and metrics["eval_loss"] > 0


@pytest.mark.slow
def test_evaluate_scores_and_reports(local_run: LocalRun) -> None:
    steps = {step.name: step for step in local_run.steps}
    metrics = steps["evaluate"].metrics
    for name in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        assert 0 <= metrics[f"{name}_low"] <= metrics[name] <= metrics[f"{name}_high"] <= 100
    assert metrics["samples"] == 16
    assert metrics[f"lead{LEAD}_rouge1"] > 10  # the baseline, scored through the same path
    # The un-fine-tuned model, generated and scored the same way, and how varied each is.
    assert 0 <= metrics["base_rougeLsum_low"] <= metrics["base_rougeLsum"] <= 100
    assert 0 < metrics["distinct_predictions"] <= 1
    assert 0 < metrics["base_distinct_predictions"] <= 1
    report = Path(steps["evaluate"].outputs["report"]).read_text()
    assert "<table" in report and "rougeLsum" in report
    predictions = Path(steps["evaluate"].outputs["predictions"]) / "predictions.jsonl"
    assert len(predictions.read_text().splitlines()) == 16


@pytest.mark.slow
def test_cli_names_the_failing_step_and_its_reason(tmp_path: Path) -> None:
    """On a user's CSV (one file: no test split) whose columns the config does not name:
    the console shows the warning about the data in the step's progress, then the step's
    error first, and the summary repeats it."""
    data = tmp_path / "mine.csv"
    data.write_text("document,summary\n" + "".join(f"text {i},sum {i}\n" for i in range(20)))
    result = run_pipeline(
        "--config",
        str(REPO / "configs" / "local.json"),
        "--set",
        f"data.dataset={data}",
        "--set",
        'data.columns={"document": "no_such_column", "summary": "summary"}',
        "--set",
        # Its own registry, not the checkout's runs/registry, which `make demo` leaves there.
        f"deploy.registry_dir={tmp_path / 'registry'}",
        "--pipeline-root",
        str(tmp_path),
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    download = lines[lines.index("▸ download") :]
    assert download[2] == (
        f"    warning: {data} has no split 'test': no test split; evaluate will score "
        "validation (splits there: train)"
    )
    assert download[3].startswith("✗ download failed after ")
    assert download[3].endswith(
        f" s: data.columns.document: column 'no_such_column' not in split 'train' of {data} "
        "(columns there: document, summary)"
    )
    assert download[4] == ""  # then the summary: no executor JSON, no last lines
    assert "registry" not in result.stdout  # nothing deployed: no registry to list
    summary = result.stdout
    assert "[FAIL] download" in summary
    assert "no_such_column" in summary
    assert "(columns there: document, summary)" in summary  # names what exists
    assert "[skip] preprocess" in summary
    assert "Pipeline failed" in summary


@pytest.mark.slow
def test_the_first_run_deploys_to_an_empty_endpoint(
    local_run: LocalRun, registry_dir: Path
) -> None:
    from llm_pipeline.registry.local.registry import LocalRegistry

    steps = {step.name: step for step in local_run.steps}
    gate = steps["should-deploy"]
    assert gate.outputs["Output"] == "True"
    assert "serves nothing yet" in gate.outputs["reason"]
    assert steps["deploy"].outputs["version"] == f"{MODEL}@1"
    served = LocalRegistry(registry_dir).served_version(ENDPOINT)
    assert served is not None and served.ref == f"{MODEL}@1"
    # The registered metrics are the evaluation's, and the files outlive the run folder.
    assert served.metrics["rougeLsum"] == steps["evaluate"].metrics["rougeLsum"]
    # ... and so is what they were scored on, for later gates to compare like with like.
    fingerprint = steps["evaluate"].outputs["evaluation_data"]
    assert served.labels == {EVALUATION_DATA_LABEL: fingerprint} and len(fingerprint) == 32
    assert (Path(served.uri) / "model.safetensors").is_file()
    assert not Path(served.uri).is_relative_to(local_run.run_dir)  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_second_run_is_gated_against_the_served_version_and_rolled_back(
    local_run: LocalRun, registry_dir: Path, runs_root: Path
) -> None:
    """Through the CLI, as a user runs it, in the same runs folder: download and preprocess
    are reused (same data, same settings); the gate compares with version 1, which the
    endpoint serves, scored by this run's evaluate on this run's rows, and says so;
    `override: always` ships version 2 whatever its score (a shorter run, SECOND_RUN, need
    not beat the first); rollback restores version 1.
    tests/local/test_local_condition.py covers a gate that says no."""
    result = run_pipeline(
        "--config",
        str(REPO / "configs" / "local.json"),
        *[arg for item in [*SMALL, *SECOND_RUN] for arg in ("--set", item)],
        "--set",
        f"deploy.registry_dir={registry_dir}",
        "--set",
        "deploy_policy.override=always",
        "--pipeline-root",
        str(runs_root),
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    summary = result.stdout
    gate = next(line for line in summary.splitlines() if line.startswith("Gate: "))
    assert gate.startswith("Gate: deploy: rougeLsum ")
    # Version 1 scored again, on this run's 4 rows (evaluate.max_samples), is the bar.
    assert f"served by version {MODEL}@1 (both scored on this run's 4 evaluation rows)" in gate
    assert gate.endswith("deploy_policy.override is 'always', deploying")
    assert f"Deployed {MODEL}@2 to endpoint {ENDPOINT}." in summary
    # deploy.registry_dir is not the default: the printed command names it.
    serve = ["python", "pipeline.py", "serve", "--endpoint", ENDPOINT]
    assert shlex.join([*serve, "--registry-dir", str(registry_dir), "--port", "8080"]) in summary
    assert "curl -s localhost:8080/predict" in summary
    for step in ("download", "preprocess"):
        assert f"[ok  ] {step:<14} reused: same inputs as an earlier run" in summary
    assert "[ok  ] finetune       reused" not in summary  # training always runs again

    rollback = run_pipeline(
        "rollback", "--endpoint", ENDPOINT, "--registry-dir", str(registry_dir), timeout=120
    )
    assert rollback.returncode == 0, rollback.stderr
    assert f"rolled back from {MODEL}@2 to {MODEL}@1" in rollback.stdout
    registry = run_pipeline("registry", "--registry-dir", str(registry_dir), timeout=120)
    assert f"endpoint {ENDPOINT}: serves {MODEL}@1 " in registry.stdout


@pytest.mark.slow
def test_the_run_report_shows_the_run_in_a_browser(local_run: LocalRun, tmp_path: Path) -> None:
    """One page per run, in its folder: steps and times, the loss curves, the scores beside
    the baselines (the un-fine-tuned model among them), the gate, the resolved config."""
    from llm_pipeline.cli.run import print_summary

    assert local_run.run_dir is not None
    print_summary(local_run, load_config(REPO / "configs" / "local.json", SMALL).config)
    report = local_run.run_dir / "report.html"
    shown = render_in_chromium(report, tmp_path, size="1200,2400")
    assert '<svg id="loss-curve"' in shown.dom and 'data-name="train loss"' in shown.dom
    assert '<table id="scores">' in shown.dom and "before fine-tuning" in shown.dom
    assert '<table id="steps">' in shown.dom and "Gate: deploy." in shown.dom
    assert "builtin:docstrings" in shown.dom  # the resolved config
    assert len(shown.colours) > 1, "the screenshot is blank"
