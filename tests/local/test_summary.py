"""The summary a person reads when a local run ends, and the run report it points at."""

import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from llm_pipeline.cli.clean import DEFAULT_ROOT, clean_command
from llm_pipeline.config import DeployConfig
from llm_pipeline.evaluation.charts import loss_chart
from llm_pipeline.local.run_pipeline import LocalRun, StepOutcome, _outcome
from llm_pipeline.local.run_report import write_run_report
from llm_pipeline.local.summary import format_summary

from ..pipeline_cli import REPO

METRICS = {
    "rougeLsum": 24.5,
    "rougeLsum_low": 21.0,
    "rougeLsum_high": 27.25,
    "distinct_predictions": 0.97,
    "base_rougeLsum": 2.5,
    "base_rougeLsum_low": 1.0,
    "base_rougeLsum_high": 4.0,
    "base_distinct_predictions": 0.03,
    "lead1_rougeLsum": 18.0,
    "lead1_rougeLsum_low": 16.5,
    "lead1_rougeLsum_high": 19.5,
    "samples": 64.0,
}


ZERO = "0 (auto: no DeepSpeed: the whole training state, 1.2 GiB, fits 16 GiB of RAM <x>)"


def _run(tmp_path: Path) -> LocalRun:
    run_dir = tmp_path / "runs" / "demo-1"
    model = run_dir / "finetune" / "trained_model"
    model.mkdir(parents=True)
    history = [
        {"step": 4, "loss": 6.5},
        {"step": 8, "loss": 5.0},
        {"step": 8, "eval_loss": 5.25},
        {"step": 12, "loss": 4.0},
        {"step": 12, "eval_loss": 4.5},
        {"step": 12, "train_runtime": 30.0},
    ]
    (model / "training_log.json").write_text(json.dumps(history))
    resolved = run_dir / "configure" / "resolved"
    resolved.parent.mkdir(parents=True)
    resolved.write_text('{"name": "demo", "train": {"epochs": 2}}')
    predictions = run_dir / "evaluate" / "predictions"
    predictions.mkdir(parents=True)
    steps = (
        StepOutcome("configure", "succeeded", {"resolved": str(resolved)}, seconds=1.5),
        StepOutcome("download", "succeeded", cached=True),
        StepOutcome(
            "finetune",
            "succeeded",
            {"trained_model": str(model)},
            details={"zero_stage": ZERO},
            seconds=190,
        ),
        StepOutcome(
            "evaluate", "succeeded", {"predictions": str(predictions)}, METRICS, seconds=42
        ),
        StepOutcome(
            "should-deploy",
            "succeeded",
            {"Output": "True", "reason": "the endpoint serves nothing yet: deploying"},
        ),
        StepOutcome(
            "deploy", "succeeded", {"version": "demo@1", "endpoint": "demo-endpoint"}, seconds=9
        ),
    )
    return LocalRun(run_dir=run_dir, succeeded=True, steps=steps, log_file=run_dir / "x.log")


def test_summary_leads_with_the_score_beside_its_baselines(tmp_path: Path) -> None:
    text = format_summary(_run(tmp_path))
    assert "Scores on 64 held-out examples (rougeLsum, 95% interval):" in text
    model = next(line for line in text.splitlines() if "fine-tuned model" in line)
    assert "24.50 [21.00, 27.25]" in model and "distinct predictions 97%" in model
    base = next(line for line in text.splitlines() if "before fine-tuning" in line)
    assert "2.50 [1.00, 4.00]" in base and "distinct predictions 3%" in base
    assert any("lead-1" in line and "18.00" in line for line in text.splitlines())


def test_summary_leads_with_the_gate_metric_it_is_given(tmp_path: Path) -> None:
    metrics = {"rougeL": 31.0, "rougeL_low": 29.0, "rougeL_high": 33.0, "base_rougeL": 4.0}
    run = _run(tmp_path)
    steps = tuple(
        replace(step, metrics=metrics | {"samples": 12.0}) if step.name == "evaluate" else step
        for step in run.steps
    )
    text = format_summary(replace(run, steps=steps), headline="rougeL")
    assert "Scores on 12 held-out examples (rougeL, 95% interval):" in text
    assert any(
        "fine-tuned model" in line and "31.00 [29.00, 33.00]" in line for line in text.splitlines()
    )
    assert any("before fine-tuning" in line and "4.00" in line for line in text.splitlines())


def test_summary_shows_a_classifiers_majority_class_baseline(tmp_path: Path) -> None:
    metrics = {
        "macro_f1": 0.74,
        "base_macro_f1": 0.07,
        "majority_macro_f1": 0.05,
        "majority_macro_f1_low": 0.04,
        "majority_macro_f1_high": 0.06,
        "samples": 400.0,
    }
    run = _run(tmp_path)
    steps = tuple(
        replace(step, metrics=metrics) if step.name == "evaluate" else step for step in run.steps
    )
    lines = format_summary(replace(run, steps=steps), headline="macro_f1").splitlines()
    assert any("before fine-tuning" in line and "0.07" in line for line in lines)
    assert any("majority class" in line and "0.05 [0.04, 0.06]" in line for line in lines)


def test_summary_claims_no_interval_when_evaluate_drew_none(tmp_path: Path) -> None:
    # evaluate.bootstrap_samples 0: the metrics carry no _low/_high, and the header says so.
    metrics = {"rougeLsum": 5.56, "lead1_rougeLsum": 19.81, "samples": 4.0}
    run = _run(tmp_path)
    steps = tuple(
        replace(step, metrics=metrics) if step.name == "evaluate" else step for step in run.steps
    )
    text = format_summary(replace(run, steps=steps))
    assert "Scores on 4 held-out examples (rougeLsum):" in text
    assert "interval" not in text


def test_summary_says_what_was_reused_decided_and_how_to_call_it(tmp_path: Path) -> None:
    run = _run(tmp_path)
    report = write_run_report(run, title="demo")
    assert report is not None
    (tmp_path / "registry").mkdir()
    text = format_summary(
        run, report=report, registry=tmp_path / "registry", example="It's a 'quoted' doc."
    )
    assert "download       reused: same inputs as an earlier run" in text
    assert "finetune       3 min 10 s" in text
    assert f"\nZeRO stage: {ZERO}\n" in text  # one line, after the steps
    assert "Gate: deploy: the endpoint serves nothing yet: deploying" in text
    assert "Deployed demo@1 to endpoint demo-endpoint." in text
    assert f"report      {report.resolve()}" in text and str(report).endswith(".html")
    assert f"registry    {(tmp_path / 'registry').resolve()}" in text
    # Each line names what it says: the predictions line is the file of predictions.
    predictions = tmp_path / "runs" / "demo-1" / "evaluate" / "predictions"
    assert f"predictions {predictions / 'predictions.jsonl'}" in text
    serve = "python pipeline.py serve --endpoint demo-endpoint --registry-dir"
    assert f"{serve} {(tmp_path / 'registry').resolve()} --port 8080" in text
    curl = next(line for line in text.splitlines() if "curl" in line)
    # The body is one shell word whatever the document holds (quotes included).
    assert """-d '{"instances": ["It'"'"'s a '"'"'quoted'"'"' doc."]}'""" in curl


def test_commands_run_from_another_folder_name_the_script_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python ~/llm/pipeline.py --config ...` run in another folder (where its runs/ and
    registry are): `python pipeline.py ...` would not be found there."""
    monkeypatch.setattr(sys, "argv", ["/home/me/llm/pipeline.py", "--config", "c.json"])
    (tmp_path / "registry").mkdir()
    text = format_summary(_run(tmp_path), registry=tmp_path / "registry")
    assert "(python /home/me/llm/pipeline.py registry --registry-dir " in text
    assert "Serve it:   python /home/me/llm/pipeline.py serve --endpoint demo-endpoint" in text
    assert clean_command(DEFAULT_ROOT) == "python /home/me/llm/pipeline.py clean"
    # From the repository's root, however the script is named.
    monkeypatch.chdir(REPO)
    for script in ("pipeline.py", str(REPO / "pipeline.py")):
        monkeypatch.setattr(sys, "argv", [script, "--config", "c.json"])
        assert clean_command(DEFAULT_ROOT) == "python pipeline.py clean"


def test_run_report_has_steps_loss_curve_gate_and_config(tmp_path: Path) -> None:
    report = write_run_report(_run(tmp_path), title="demo <run>")
    assert report is not None and report.name == "report.html"
    page = report.read_text()
    assert "<h1>demo &lt;run&gt;</h1>" in page
    assert '<table id="steps">' in page and "reused: same inputs as an earlier run" in page
    assert '<svg id="loss-curve"' in page
    assert page.count('class="series"') == 2  # train and eval
    assert "eval loss 4.500 at step 12" in page
    assert "Gate: deploy." in page and "demo@1" in page
    assert "&quot;epochs&quot;: 2" in page
    assert f'<p id="zero-stage">ZeRO stage: {ZERO.replace("<x>", "&lt;x&gt;")}</p>' in page


def test_a_run_shorter_than_logging_steps_draws_its_one_step_from_zero() -> None:
    """20 steps with train.logging_steps 25: the last step is logged (train/status.py), and
    the chart spans steps 0 to 20 with whole-number ticks, not a 1-step window '20 20 21'."""
    chart = loss_chart([{"step": 20, "loss": 3.5}, {"step": 20, "eval_loss": 3.75}])
    assert re.findall(r'<text class="x-tick"[^>]*>(\d+)</text>', chart) == ["0", "10", "20"]
    assert "train loss 3.500 at step 20" in chart and "eval loss 3.750 at step 20" in chart
    # Two logged steps: the ticks are whole steps, each once.
    chart = loss_chart([{"step": 1, "loss": 3.5}, {"step": 2, "loss": 3.0}])
    assert re.findall(r'<text class="x-tick"[^>]*>(\d+)</text>', chart) == ["1", "2"]


def test_the_zero_stage_comes_from_the_trained_models_metadata(tmp_path: Path) -> None:
    """The finetune step records it as text metadata of its Model artifact (numbers there
    are metrics; text is kept apart)."""
    task = tmp_path / "finetune"
    task.mkdir()
    artifact = {
        "uri": str(task / "trained_model"),
        "metadata": {"framework": "transformers", "nodes": 1, "zero_stage": ZERO},
    }
    produced = {"artifacts": {"trained_model": {"artifacts": [artifact]}}}
    (task / "executor_output.json").write_text(json.dumps(produced))
    outcome = _outcome(task, failed_step=None)
    assert outcome.details == {"framework": "transformers", "zero_stage": ZERO}
    assert outcome.metrics == {}


def test_a_run_that_failed_early_still_gets_a_report(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run = LocalRun(
        run_dir=run_dir,
        succeeded=False,
        steps=(
            StepOutcome("download", "failed", error="data.dataset: x.jsonl: no such file"),
            StepOutcome("finetune", "not run"),
        ),
    )
    report = write_run_report(run, title="t")
    assert report is not None
    page = report.read_text()
    assert "failed" in page and "loss-curve" not in page
    text = format_summary(run, report=report)
    assert "[FAIL] download" in text and "data.dataset: x.jsonl: no such file" in text
    assert "[skip] finetune" in text and "Pipeline failed" in text


def test_when_nothing_ships_the_summary_says_what_the_endpoint_still_serves(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path)
    steps = [step for step in run.steps if step.name != "deploy"]
    gate = StepOutcome(
        "should-deploy",
        "succeeded",
        {"Output": "False", "reason": "+0 is no improvement", "served_version": "demo@1"},
    )
    steps = [gate if step.name == "should-deploy" else step for step in steps]
    text = format_summary(
        LocalRun(run.run_dir, True, (*steps, StepOutcome("deploy", "not run"))),
        endpoint="demo-endpoint",
        registry=Path(DeployConfig().registry_dir),
    )
    assert "Gate: do not deploy: +0 is no improvement" in text
    assert "The endpoint demo-endpoint still serves demo@1." in text
    assert "python pipeline.py serve --endpoint demo-endpoint --port 8080" in text
    assert "Deployed" not in text


def test_printed_commands_name_the_registry_when_it_is_not_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    registry = tmp_path / "my registry"
    registry.mkdir()
    run = _run(tmp_path)
    text = format_summary(run, registry=registry)
    flag = f"--registry-dir '{registry.resolve()}'"
    assert f"python pipeline.py serve --endpoint demo-endpoint {flag} --port 8080" in text
    assert f"(python pipeline.py registry {flag})" in text
    default = format_summary(run, registry=Path(DeployConfig().registry_dir))
    assert "--registry-dir" not in default
    assert "(python pipeline.py registry)" not in default  # nothing there: no command to list
    Path(DeployConfig().registry_dir).mkdir(parents=True)
    default = format_summary(run, registry=Path(DeployConfig().registry_dir))
    assert "(python pipeline.py registry)" in default


def test_no_serve_command_where_pipeline_py_cannot_serve_the_endpoint(tmp_path: Path) -> None:
    """A run that deployed to Vertex AI has no local registry: `serve` would refuse it."""
    text = format_summary(_run(tmp_path))
    assert "Deployed demo@1 to endpoint demo-endpoint." in text
    assert "pipeline.py serve" not in text and "curl" not in text


def _with_finetune_metrics(run: LocalRun, metrics: dict[str, float]) -> LocalRun:
    steps = tuple(
        replace(step, metrics=metrics) if step.name == "finetune" else step for step in run.steps
    )
    return replace(run, steps=steps)


def test_steps_lost_to_non_finite_gradients_are_said_in_the_summary_and_the_report(
    tmp_path: Path,
) -> None:
    metrics = {"global_step": 300.0, "skipped_steps": 15.0, "nonfinite_steps": 15.0}
    run = _with_finetune_metrics(_run(tmp_path), metrics)
    line = (
        "Training lost steps to non-finite gradients (inf or NaN): 15 of 300 optimizer steps "
        "were skipped (the weights not updated). Likely causes: the learning rate, fp16, or "
        "the data."
    )
    assert line in format_summary(run).splitlines()
    report = write_run_report(run, title="demo")
    assert report is not None
    page = report.read_text()
    assert "id='lost-steps'" in page and "15 of 300 optimizer steps were skipped" in page


def test_non_finite_steps_that_reached_the_weights_count_from_the_resumed_step(
    tmp_path: Path,
) -> None:
    metrics = {"global_step": 50.0, "resumed_from_step": 20.0, "nonfinite_steps": 12.0}
    text = format_summary(_with_finetune_metrics(_run(tmp_path), metrics))
    assert "12 of 30 optimizer steps applied them to the weights" in text
    assert "skipped" not in text


def test_a_run_that_lost_no_step_says_nothing_of_it(tmp_path: Path) -> None:
    metrics = {"global_step": 300.0, "skipped_steps": 0.0, "nonfinite_steps": 0.0}
    run = _with_finetune_metrics(_run(tmp_path), metrics)
    assert "non-finite" not in format_summary(run)
    report = write_run_report(run, title="demo")
    assert report is not None and "lost-steps" not in report.read_text()


def test_summary_says_what_the_run_kept_on_disk_and_how_to_clean_up(tmp_path: Path) -> None:
    from llm_pipeline.local.disk import kept_on_disk

    run = _run(tmp_path)
    assert run.run_dir is not None
    checkpoint = run.run_dir / "finetune" / "checkpoints" / "run-1" / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"x" * 2_500_000)
    kept = kept_on_disk(run.run_dir)
    text = format_summary(run, kept=kept, clean_command="python pipeline.py clean")
    assert f"Kept on disk: 2.5 MB in {run.run_dir} (checkpoints 2.5 MB of it, in " in text
    assert "Old runs' checkpoints and data: python pipeline.py clean" in text


def _stopped_in(run: LocalRun, step_name: str, signum: int) -> LocalRun:
    """`run` as a signal leaves it stopped in `step_name`: the steps before it ran, those
    after it did not."""
    names = [step.name for step in run.steps]
    at = names.index(step_name)
    steps = tuple(
        step if i < at else replace(step, status="stopped" if i == at else "not run")
        for i, step in enumerate(run.steps)
    )
    return replace(run, steps=steps, succeeded=False, stopped_by=signum)


def test_a_stopped_run_says_what_it_stopped_kept_and_how_to_clean_up(tmp_path: Path) -> None:
    import signal

    from llm_pipeline.local.summary import format_stop

    run = _run(tmp_path)
    stopped = _stopped_in(run, "finetune", signal.SIGINT)
    text = format_summary(stopped)
    assert "[STOP] finetune" in text and "[skip] evaluate" in text
    report = write_run_report(stopped, title="demo")
    assert report is not None
    page = report.read_text()
    assert "<b>run:</b> stopped" in page and "<td>finetune</td><td>stopped</td>" in page
    assert text.endswith("Pipeline stopped (4 min 02 s in steps).")
    line = format_stop(
        stopped,
        checkpoint=tmp_path / "ck" / "run-1" / "checkpoint-40",
        resume_command="python pipeline.py --config c.json --set train.checkpoint_dir=/ck",
        clean_command="python pipeline.py clean",
    )
    assert line == (
        "Ctrl-C (SIGINT): stopped finetune and every process it started; kept checkpoint-40 in "
        f"{tmp_path / 'ck' / 'run-1'}; resume: python pipeline.py --config c.json --set "
        "train.checkpoint_dir=/ck; clean up: python pipeline.py clean"
    )
    nothing = format_stop(
        replace(stopped, stopped_by=signal.SIGTERM),
        checkpoint=None,
        resume_command="",
        clean_command="python pipeline.py clean",
    )
    assert nothing.startswith("SIGTERM: stopped finetune and every process it started; ")
    assert "; no complete checkpoint was kept; " in nothing


def test_a_run_stopped_after_training_does_not_read_as_training_lost(tmp_path: Path) -> None:
    import signal

    from llm_pipeline.local.summary import format_stop

    stopped = _stopped_in(_run(tmp_path), "evaluate", signal.SIGINT)
    line = format_stop(
        stopped, checkpoint=None, resume_command="", clean_command="python pipeline.py clean"
    )
    assert line == (
        "Ctrl-C (SIGINT): stopped evaluate and every process it started; finetune had finished "
        "but saved no checkpoint to resume from: a rerun trains again; clean up: "
        "python pipeline.py clean"
    )
