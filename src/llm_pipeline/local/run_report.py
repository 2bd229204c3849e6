"""The run report: one self-contained HTML page per local run, written into its folder.

It is the evaluate step's page (the one the Vertex UI shows for that step: scores with
intervals beside the baselines, sample predictions) with the pipeline's view put in at its
top: how the run ended, each step's duration, the ZeRO stage finetune trained under and
why, the training loss curves, the gate's decision and why, and the resolved config. A run
that failed before evaluate still gets the pipeline's view, so the page is also where to
look first when something went wrong.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from llm_pipeline.evaluation.charts import escape, loss_chart
from llm_pipeline.evaluation.report import PIPELINE_VIEW, report_page
from llm_pipeline.local.run_pipeline import LocalRun, StepOutcome
from llm_pipeline.local.summary import lost_steps_line
from llm_pipeline.output_files import TRAINING_LOG_FILE, Step
from llm_pipeline.progress import format_duration

#: The page's file name in the run folder (evaluate's own page: EVALUATION_REPORT_FILE).
RUN_REPORT_FILE = "report.html"


def write_run_report(run: LocalRun, *, title: str) -> Path | None:
    """Write the page into the run folder; its path, or None when the run made no folder."""
    if run.run_dir is None:
        return None
    view = "\n".join(
        [
            "<h2>Pipeline</h2>",
            _steps_table(run),
            *_zero_stage(run.outcome(Step.FINETUNE)),
            *_gate(run),
            *_loss_section(run.outcome(Step.FINETUNE)),
            *_config_section(run.outcome(Step.CONFIGURE)),
        ]
    )
    evaluation = _evaluation_page(run.outcome(Step.EVALUATE))
    if evaluation is not None and PIPELINE_VIEW in evaluation:
        # The evaluation page's own heading (the task's report title) gives way to the run's.
        page = re.sub(
            r"<h1>.*?</h1>",
            lambda _: f"<h1>{escape(title)}</h1>",
            evaluation.replace(PIPELINE_VIEW, view, 1),
            count=1,
            flags=re.S,
        )
    else:
        page = report_page(title, f"<h1>{escape(title)}</h1>\n{view}")
    path = run.run_dir / RUN_REPORT_FILE
    path.write_text(page, encoding="utf-8")
    return path


def _steps_table(run: LocalRun) -> str:
    rows = []
    for step in run.steps:
        took = step.time_taken or "—"
        rows.append(
            f"<tr><td>{escape(step.name)}</td><td>{escape(step.status)}</td><td>{escape(took)}</td></tr>"
        )
    total = format_duration(run.seconds)
    outcome = "stopped" if run.stopped_by else "succeeded" if run.succeeded else "failed"
    return (
        f'<p class="facts"><span><b>run:</b> {escape(outcome)}</span>'
        f"<span><b>steps' time:</b> {escape(total)}</span>"
        f"<span><b>folder:</b> {escape(run.run_dir)}</span></p>"
        '<table id="steps"><thead><tr><th>step</th><th>outcome</th><th>time</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _gate(run: LocalRun) -> list[str]:
    gate, shipped = run.outcome(Step.SHOULD_DEPLOY), run.outcome(Step.DEPLOY)
    if gate is None or gate.status != "succeeded":
        return []
    decision = "deploy" if gate.outputs.get("Output") == "True" else "do not deploy"
    reason = gate.outputs.get("reason", "").rstrip(".")
    lines = [f"<p id='gate'><b>Gate: {escape(decision)}.</b> {escape(reason)}."]
    if shipped is not None and shipped.status == "succeeded":
        version, endpoint = shipped.outputs.get("version", ""), shipped.outputs.get("endpoint", "")
        lines.append(f" Deployed <b>{escape(version)}</b> to endpoint <b>{escape(endpoint)}</b>.")
    lines.append("</p>")
    return ["<h2>Deploy decision</h2>", "".join(lines)]


def _zero_stage(finetune: StepOutcome | None) -> list[str]:
    stage = finetune.details.get("zero_stage") if finetune is not None else None
    return [f'<p id="zero-stage">ZeRO stage: {escape(stage)}</p>'] if stage else []


def _loss_section(finetune: StepOutcome | None) -> list[str]:
    if finetune is None or "trained_model" not in finetune.outputs:
        return []
    lost = lost_steps_line(finetune.metrics)
    warning = [f"<p id='lost-steps' class='warning'><b>{escape(lost)}</b></p>"] if lost else []
    log = Path(finetune.outputs["trained_model"]) / TRAINING_LOG_FILE
    try:
        history = json.loads(log.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ["<h2>Training loss</h2>", *warning] if warning else []
    return ["<h2>Training loss</h2>", *warning, loss_chart(history)]


def _config_section(configure: StepOutcome | None) -> list[str]:
    if configure is None or "resolved" not in configure.outputs:
        return []
    try:
        text = Path(configure.outputs["resolved"]).read_text(encoding="utf-8")
    except OSError:
        return []
    return [
        "<h2>Configuration</h2>",
        "<details><summary>The resolved config this run used (parameters applied)</summary>"
        f'<pre id="config">{escape(text)}</pre></details>',
    ]


def _evaluation_page(evaluate: StepOutcome | None) -> str | None:
    if evaluate is None or "report" not in evaluate.outputs:
        return None
    try:
        return Path(evaluate.outputs["report"]).read_text(encoding="utf-8")
    except OSError:
        return None
