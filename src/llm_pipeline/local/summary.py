"""What `pipeline.py` prints when a local run ends: the few lines a person reads.

Each step's outcome and time; the ZeRO stage finetune trained under and why; the model's
headline score beside its baselines (the un-fine-tuned model, lead-k) and the share of
distinct predictions; the gate's decision and why; where the outputs are (absolute paths,
the report an `.html` a browser opens); and how to call the endpoint. Everything else is
in the run's folder and its `pipeline.log`.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from llm_pipeline.config import DeployConfig
from llm_pipeline.local.disk import KeptOnDisk
from llm_pipeline.local.run_pipeline import LocalRun, StepOutcome
from llm_pipeline.local.stopping import SIGNAL_NAMES
from llm_pipeline.output_files import METRICS_FILE, PREDICTIONS_FILE, Step
from llm_pipeline.progress import format_duration

#: The score the summary leads with unless told (the gate's metric): what summarization
#: papers report first.
HEADLINE = "rougeLsum"
#: Where `pipeline.py serve` listens unless told otherwise.
SERVE_PORT = 8080
_MARKS = {"succeeded": "ok  ", "failed": "FAIL", "stopped": "STOP", "not run": "skip"}


def format_summary(
    run: LocalRun,
    *,
    report: Path | None = None,
    registry: Path | None = None,
    example: Any = None,
    endpoint: str | None = None,
    headline: str = HEADLINE,
    port: int = SERVE_PORT,
    kept: KeptOnDisk | None = None,
    clean_command: str = "",
) -> str:
    """The summary as text. `registry` is a local registry's folder (None for a registry
    `pipeline.py serve` cannot serve from: no command to serve is printed then); `example`
    a document to put in the ready `curl` command; `endpoint` the config's endpoint, named
    when this run deployed nothing but the endpoint serves an earlier version; `headline`
    the score shown for the model and its baselines (the config's gate metric); `port`
    the one the printed `serve` command listens on; `kept` what the run left on disk,
    said with `clean_command`, the command that removes old runs' share."""
    gate, shipped = run.outcome(Step.SHOULD_DEPLOY), run.outcome(Step.DEPLOY)
    lines = ["", f"Run folder: {run.run_dir or '(none was created)'}"]
    lines += [_step_line(step) for step in run.steps]
    lines += _zero_stage(run.outcome(Step.FINETUNE))
    lines += _lost_steps(run.outcome(Step.FINETUNE))
    lines += _scores(run.outcome(Step.EVALUATE), headline)
    lines += _gate(gate, shipped)
    lines += _places(run, report=report, registry=registry)
    if kept is not None:
        lines += ["", kept.describe()]
        lines += [f"Old runs' checkpoints and data: {clean_command}"] if clean_command else []
    if registry is not None:
        lines += _serving(gate, shipped, example, endpoint, registry_flags(registry), port)
    took = format_duration(run.seconds)
    ended = "stopped" if run.stopped_by else "succeeded" if run.succeeded else "failed"
    lines.append(f"Pipeline {ended} ({took} in steps).")
    return "\n".join(lines)


def format_stop(
    run: LocalRun, *, checkpoint: Path | None, resume_command: str, clean_command: str
) -> str:
    """The one line a stopped run ends with: what was stopped, what was kept (the last
    complete checkpoint, and the command that resumes from it) and how to clean up."""
    assert run.stopped_by is not None
    stopped = [step.name for step in run.steps if step.status == "stopped"]
    what = f"stopped {', '.join(stopped)} and every process it started" if stopped else "stopped"
    finetune = run.outcome(Step.FINETUNE)
    if checkpoint is None and finetune is not None and finetune.status == "succeeded":
        # Stopped after training: say so, lest "no checkpoint" read as the training lost.
        kept = "finetune had finished but saved no checkpoint to resume from: a rerun trains again"
    elif checkpoint is None:
        kept = "no complete checkpoint was kept"
    elif resume_command:
        kept = f"kept {checkpoint.name} in {checkpoint.parent}; resume: {resume_command}"
    else:
        kept = f"kept {checkpoint.name} in {checkpoint.parent}, which the next run resumes from"
    signal = SIGNAL_NAMES.get(run.stopped_by, f"signal {run.stopped_by}")
    return f"{signal}: {what}; {kept}; clean up: {clean_command}"


def _step_line(step: StepOutcome) -> str:
    line = f"  [{_MARKS[step.status]}] {step.name:<14} {step.time_taken}".rstrip()
    if step.error:
        line += f"\n         {step.error}"
    return line


def lost_steps_line(metrics: dict[str, float]) -> str | None:
    """What the finetune step's metrics say of optimizer steps lost to non-finite gradients
    (`skipped_steps`, `nonfinite_steps`), as one line; None when none was lost."""
    skipped = int(metrics.get("skipped_steps", 0))
    applied = int(metrics.get("nonfinite_steps", 0)) - skipped
    if skipped <= 0 and applied <= 0:
        return None
    steps = int(metrics.get("global_step", 0)) - int(metrics.get("resumed_from_step", 0))
    lost = []
    if skipped > 0:
        lost.append(f"{skipped} of {steps} optimizer steps were skipped (the weights not updated)")
    if applied > 0:
        lost.append(f"{applied} of {steps} optimizer steps applied them to the weights")
    return (
        f"Training lost steps to non-finite gradients (inf or NaN): {'; '.join(lost)}. "
        "Likely causes: the learning rate, fp16, or the data."
    )


def _lost_steps(finetune: StepOutcome | None) -> list[str]:
    line = lost_steps_line(finetune.metrics) if finetune is not None else None
    return ["", line] if line else []


def _zero_stage(finetune: StepOutcome | None) -> list[str]:
    """`ZeRO stage: 0 (auto: ...)`: how finetune trained, and why (`train.zero_stage`)."""
    stage = finetune.details.get("zero_stage") if finetune is not None else None
    return [f"ZeRO stage: {stage}"] if stage else []


def _scores(evaluate: StepOutcome | None, headline: str) -> list[str]:
    if evaluate is None or evaluate.status != "succeeded" or headline not in evaluate.metrics:
        return []
    m = evaluate.metrics
    samples = int(m.get("samples", 0))
    # Intervals are there only when evaluate drew them (evaluate.bootstrap_samples > 0).
    interval = ", 95% interval" if f"{headline}_low" in m else ""
    lines = ["", f"Scores on {samples} held-out examples ({headline}{interval}):"]
    rows = [("fine-tuned model", "", "distinct_predictions")]
    rows += [("before fine-tuning", "base_", "base_distinct_predictions")]
    # A classifier's other baseline: its training split's most frequent label for every row.
    rows += [("majority class", "majority_", "")]
    for key in m:
        if lead := re.fullmatch(rf"lead(\d+)_{re.escape(headline)}", key):
            rows.append((f"lead-{lead.group(1)}", f"lead{lead.group(1)}_", ""))
    for name, prefix, distinct in rows:
        if f"{prefix}{headline}" not in m:
            continue
        score = f"{m[f'{prefix}{headline}']:6.2f}"
        low, high = m.get(f"{prefix}{headline}_low"), m.get(f"{prefix}{headline}_high")
        interval = f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
        share = f"distinct predictions {100 * m[distinct]:.0f}%" if distinct in m else ""
        lines.append(f"  {name:<20}{score} {interval:<16} {share}".rstrip())
    return lines


def _gate(gate: StepOutcome | None, shipped: StepOutcome | None) -> list[str]:
    lines = []
    if gate is not None and gate.status == "succeeded":
        decision = "deploy" if gate.outputs.get("Output") == "True" else "do not deploy"
        lines.append(f"Gate: {decision}: {gate.outputs.get('reason', '')}")
    if shipped is not None and shipped.status == "succeeded":
        version, endpoint = shipped.outputs.get("version", ""), shipped.outputs.get("endpoint", "")
        lines.append(f"Deployed {version} to endpoint {endpoint}.")
    return ["", *lines] if lines else []


def _places(
    run: LocalRun,
    *,
    report: Path | None,
    registry: Path | None,
) -> list[str]:
    places = []
    if report is not None:
        places.append(("report", f"{report.resolve()}"))
    finetune, evaluate = run.outcome(Step.FINETUNE), run.outcome(Step.EVALUATE)
    if finetune is not None and "trained_model" in finetune.outputs:
        places.append(("model", finetune.outputs["trained_model"]))
    if evaluate is not None and "predictions" in evaluate.outputs:
        folder = Path(evaluate.outputs["predictions"])
        places.append(("metrics", str(folder / METRICS_FILE)))
        places.append(("predictions", str(folder / PREDICTIONS_FILE)))
    if registry is not None and registry.is_dir():  # a registry command refuses a missing one
        listing = shlex.join(typed_command("registry", *registry_flags(registry)))
        places.append(("registry", f"{registry.resolve()}  ({listing})"))
    if run.log_file is not None:
        places.append(("log", str(run.log_file)))
    if not places:
        return []
    return ["", "Where things are:", *(f"  {name:<12}{where}" for name, where in places)]


def typed_command(*words: str) -> list[str]:
    """A `pipeline.py` command as the person types it: `pipeline.py` where the working
    directory holds the script that runs (the repository's root), else the script as they
    ran it (`python ~/llm/pipeline.py ...` from another folder, where `pipeline.py` alone is
    not found)."""
    script = Path(sys.argv[0])
    elsewhere = script.name == "pipeline.py" and script.resolve() != Path(script.name).resolve()
    return ["python", sys.argv[0] if elsewhere else "pipeline.py", *words]


def registry_flags(registry: Path) -> list[str]:
    """The flags a registry command needs to read `registry`: none for the default folder
    (from the working directory the run started in), else `--registry-dir` and the folder."""
    if registry.resolve() == Path(DeployConfig().registry_dir).resolve():
        return []
    return ["--registry-dir", str(registry.resolve())]


def _serving(
    gate: StepOutcome | None,
    shipped: StepOutcome | None,
    example: Any,
    endpoint: str | None,
    flags: list[str],
    port: int,
) -> list[str]:
    if shipped is not None and shipped.status == "succeeded" and shipped.outputs.get("endpoint"):
        endpoint, lead = shipped.outputs["endpoint"], []
    elif gate is not None and gate.outputs.get("served_version") and endpoint:
        lead = [f"The endpoint {endpoint} still serves {gate.outputs['served_version']}."]
    else:
        return []
    body = json.dumps({"instances": [example or "Paste an input for the model here."]})
    serve = typed_command("serve", "--endpoint", endpoint, *flags, "--port", str(port))
    return [
        "",
        *lead,
        f"Serve it:   {shlex.join(serve)}",
        f"Then ask:   curl -s localhost:{port}/predict -H 'Content-Type: application/json' "
        f"-d {shlex.quote(body)}",
        f"Or open     http://localhost:{port}/ in a browser.",
    ]
