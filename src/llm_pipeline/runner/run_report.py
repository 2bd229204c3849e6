"""The run report: one self-contained HTML page per local run, written into its folder.

It is the evaluate step's page (the one the Vertex UI shows for that step: scores with
intervals beside the baselines, sample predictions) with the pipeline's view put in at its
top: how the run ended, each step's duration, the training loss curves, the gate's decision
and why, and the resolved config. A run that failed before evaluate still gets the
pipeline's view, so the page is also where to look first when something went wrong.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_pipeline.evaluation.report import PIPELINE_VIEW, report_page
from llm_pipeline.output_files import TRAINING_LOG_FILE, Step
from llm_pipeline.progress import format_duration
from llm_pipeline.runner.local import LocalRun, StepOutcome

#: The page's file name in the run folder (evaluate's own report is output_files.REPORT_FILE).
RUN_REPORT_FILE = "report.html"

_SVG_NS = "http://www.w3.org/2000/svg"
_SERIES = (("loss", "train loss", "#0969da"), ("eval_loss", "eval loss", "#fb8f44"))


def write_run_report(run: LocalRun, *, title: str) -> Path | None:
    """Write the page into the run folder; its path, or None when the run made no folder."""
    if run.run_dir is None:
        return None
    view = "\n".join(
        [
            "<h2>Pipeline</h2>",
            _steps_table(run),
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
            lambda _: f"<h1>{_e(title)}</h1>",
            evaluation.replace(PIPELINE_VIEW, view, 1),
            count=1,
            flags=re.S,
        )
    else:
        page = report_page(title, f"<h1>{_e(title)}</h1>\n{view}")
    path = run.run_dir / RUN_REPORT_FILE
    path.write_text(page, encoding="utf-8")
    return path


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _steps_table(run: LocalRun) -> str:
    rows = []
    for step in run.steps:
        took = step.time_taken or "—"
        rows.append(
            f"<tr><td>{_e(step.name)}</td><td>{_e(step.status)}</td><td>{_e(took)}</td></tr>"
        )
    total = format_duration(run.seconds)
    outcome = "succeeded" if run.succeeded else "failed"
    return (
        f'<p class="facts"><span><b>run:</b> {_e(outcome)}</span>'
        f"<span><b>steps' time:</b> {_e(total)}</span>"
        f"<span><b>folder:</b> {_e(run.run_dir)}</span></p>"
        '<table id="steps"><thead><tr><th>step</th><th>outcome</th><th>time</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _gate(run: LocalRun) -> list[str]:
    gate, shipped = run.outcome(Step.SHOULD_DEPLOY), run.outcome(Step.DEPLOY)
    if gate is None or gate.status != "succeeded":
        return []
    decision = "deploy" if gate.outputs.get("Output") == "True" else "do not deploy"
    reason = gate.outputs.get("reason", "").rstrip(".")
    lines = [f"<p id='gate'><b>Gate: {_e(decision)}.</b> {_e(reason)}."]
    if shipped is not None and shipped.status == "succeeded":
        version, endpoint = shipped.outputs.get("version", ""), shipped.outputs.get("endpoint", "")
        lines.append(f" Deployed <b>{_e(version)}</b> to endpoint <b>{_e(endpoint)}</b>.")
    lines.append("</p>")
    return ["<h2>Deploy decision</h2>", "".join(lines)]


def _loss_section(finetune: StepOutcome | None) -> list[str]:
    if finetune is None or "trained_model" not in finetune.outputs:
        return []
    log = Path(finetune.outputs["trained_model"]) / TRAINING_LOG_FILE
    try:
        history = json.loads(log.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return ["<h2>Training loss</h2>", loss_chart(history)]


def loss_chart(history: Sequence[dict[str, Any]]) -> str:
    """Train and eval loss against the step, as an inline SVG line chart."""
    series = []
    for key, name, colour in _SERIES:
        points = [
            (float(entry["step"]), float(entry[key]))
            for entry in history
            if key in entry and "step" in entry
        ]
        if points:
            series.append((name, colour, points))
    if not series:
        return "<p>No loss was logged (fewer steps than train.logging_steps).</p>"
    steps = [x for _, _, points in series for x, _ in points]
    losses = [y for _, _, points in series for _, y in points]
    x_low, x_high = min(steps), max(max(steps), min(steps) + 1)
    y_low, y_high = min(0.0, min(losses)), max(losses) * 1.05 or 1.0
    width, height, left, bottom, top = 760, 280, 48, 36, 24
    plot_w, plot_h = width - left - 16, height - bottom - top

    def x(step: float) -> float:
        return left + plot_w * (step - x_low) / (x_high - x_low)

    def y(loss: float) -> float:
        return top + plot_h * (1 - (loss - y_low) / (y_high - y_low))

    parts = [
        f'<svg id="loss-curve" xmlns="{_SVG_NS}" width="{width}" height="{height}" role="img" '
        'aria-label="training and evaluation loss by step">',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#57606a"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#57606a"/>',
    ]
    for value in (y_low, (y_low + y_high) / 2, y_high):
        parts.append(
            f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.2f}</text>'
        )
    for value in (x_low, (x_low + x_high) / 2, x_high):
        parts.append(
            f'<text x="{x(value):.1f}" y="{top + plot_h + 14}" text-anchor="middle">'
            f"{value:.0f}</text>"
        )
    for i, (name, colour, points) in enumerate(series):
        path = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in points)
        parts.append(
            f'<polyline class="series" data-name="{_e(name)}" points="{path}" fill="none" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        for s, v in points:
            parts.append(
                f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}">'
                f"<title>{_e(name)} {v:.3f} at step {s:.0f}</title></circle>"
            )
        parts.append(
            f'<rect x="{left + plot_w - 190 + i * 95}" y="4" width="10" height="10" '
            f'fill="{colour}"/><text x="{left + plot_w - 176 + i * 95}" y="13">{_e(name)}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle">step</text></svg>'
    )
    return "".join(parts)


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
        f'<pre id="config">{_e(text)}</pre></details>',
    ]


def _evaluation_page(evaluate: StepOutcome | None) -> str | None:
    if evaluate is None or "report" not in evaluate.outputs:
        return None
    try:
        return Path(evaluate.outputs["report"]).read_text(encoding="utf-8")
    except OSError:
        return None
