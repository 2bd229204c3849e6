"""The evaluate step's HTML report: one self-contained page a person can open anywhere.

KFP and Vertex show an `HTML` artifact in a sandboxed frame, often offline, so the page has
no external assets and no scripts: inline CSS, inline SVG (evaluation/charts.py), and
`<details>` for long text.
Every piece of dataset or model text is escaped, since documents and generated summaries
can contain anything, markup included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from llm_pipeline.config.data import MIN_EVALUATION_ROWS
from llm_pipeline.evaluation.charts import escape, length_histogram
from llm_pipeline.evaluation.rouge import ROUGE_TYPES, RougeResult
from llm_pipeline.progress import status

if TYPE_CHECKING:
    from llm_pipeline.tasks.base import Task

__all__ = [
    "PIPELINE_VIEW",
    "OtherScore",
    "ReportWords",
    "ScoreRow",
    "delta_cell",
    "facts_line",
    "folded_text",
    "render_page",
    "render_report",
    "report_page",
    "rouge_note",
    "rouge_rows",
    "scores_table",
    "text_sections",
    "warn_if_few_rows",
    "warning_line",
]

#: Where the run report puts the pipeline's view (steps, loss curve, gate) into this page.
PIPELINE_VIEW = "<!-- pipeline view -->"

#: Examples shown at each end of the ranking.
EXAMPLES_EACH = 20
#: Characters of a document shown before the expander.
DOCUMENT_PREVIEW = 300
#: The score examples are ranked by; rougeLsum is what summarization papers lead with.
RANK_BY = "rougeLsum"


@dataclass(frozen=True)
class ReportWords:
    """What the page calls things; a task supplies its own (`Task.report_title`, ...)."""

    title: str = "Summarization evaluation"
    source: str = "document"  # the model's input
    output: str = "summary"  # what the model writes, in general
    prediction: str = "prediction"  # one example's output, on its card

    @classmethod
    def of(cls, task: Task) -> ReportWords:
        """The words `task` gives its page, read in one place for every scorer."""
        return cls(
            title=task.report_title,
            source=task.source_label,
            output=task.output_label,
            prediction=task.prediction_label,
        )


@dataclass(frozen=True)
class OtherScore:
    """A score beside ROUGE in the table (exact match, perplexity): the model's value, each
    baseline's (by the baselines' names) and, optionally, each example's, for its card."""

    name: str
    value: float
    baselines: Mapping[str, float] = field(default_factory=dict)
    per_example: Sequence[float] | None = None
    higher_is_better: bool = True
    note: str = ""


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;
max-width:1100px;padding:0 16px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;
border-bottom:1px solid #d0d7de;padding-bottom:4px}
.facts{color:#57606a;margin:0 0 8px}.facts span{margin-right:18px}
table{border-collapse:collapse}th,td{padding:5px 12px;border-bottom:1px solid #d0d7de;
text-align:right}th:first-child,td:first-child{text-align:left}thead th{background:#f6f8fa}
.ci{color:#57606a;font-size:12px}.up{color:#1a7f37}.down{color:#cf222e}
.ex{border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;margin:10px 0}
.ex h3{font-size:13px;margin:0 0 6px;color:#57606a;font-weight:600}
.ex dl{display:grid;grid-template-columns:90px 1fr;gap:4px 10px;margin:0}
.ex dt{font-weight:600}.ex dd{margin:0;white-space:pre-wrap;overflow-wrap:anywhere}
.warning{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:8px 12px}
details summary{cursor:pointer}svg text{font:11px system-ui,sans-serif;fill:#1f2328}
"""


def render_report(
    *,
    model: RougeResult,
    documents: Sequence[str],
    references: Sequence[str],
    predictions: Sequence[str],
    baselines: Mapping[str, RougeResult] | None = None,
    facts: Mapping[str, str] | None = None,
    words: ReportWords | None = None,
    rouge_types: Sequence[str] = ROUGE_TYPES,
    others: Sequence[OtherScore] = (),
    warning: str | None = None,
) -> str:
    """The report page of a model that writes text: scores beside the baselines, output
    lengths, best and worst examples.

    `baselines` maps a name (`lead-3`, `before fine-tuning`) to its scores on the same
    examples. `facts` are short "name: value" items shown under the title (model, split,
    samples...). `rouge_types` are the ROUGE rows shown (examples are ranked by rougeLsum
    when it is among them, else by the first), `others` the rows after them. `warning`, about
    the whole evaluation (`few_rows_warning`), is shown under the facts.
    """
    words = words or ReportWords()
    sections = text_sections(
        model=model,
        documents=documents,
        references=references,
        predictions=predictions,
        words=words,
        rouge_types=rouge_types,
        others=others,
    )
    table = scores_table(
        rouge_rows(model, baselines or {}, rouge_types, others),
        list(baselines or {}),
        confidence=model.confidence,
        note=rouge_note(model, others),
    )
    return render_page(words.title, facts or {}, warning, table, sections)


def render_page(
    title: str,
    facts: Mapping[str, str],
    warning: str | None,
    table: str,
    sections: Sequence[str],
    *,
    data_note: str | None = None,
) -> str:
    """Every task's report page: the title, the facts, the warnings (`warning`, about the
    evaluation; `data_note`, the download step's about the scored split's rows), the scores
    table (`scores_table`), then the task's own sections (HTML)."""
    parts = [
        f"<h1>{escape(title)}</h1>",
        facts_line(facts),
        warning_line(warning),
        warning_line(data_note, element="data-warning"),
        PIPELINE_VIEW,
        "<h2>Scores</h2>",
        table,
        *sections,
    ]
    return report_page(title, "\n".join(parts))


def text_sections(
    *,
    model: RougeResult,
    documents: Sequence[str],
    references: Sequence[str],
    predictions: Sequence[str],
    words: ReportWords,
    rouge_types: Sequence[str],
    others: Sequence[OtherScore],
) -> list[str]:
    """The sections after the scores for a model that writes text: the lengths of its
    outputs beside the references', then its best and worst examples by ROUGE."""
    n = model.n_examples
    if not len(documents) == len(references) == len(predictions) == n:
        raise ValueError(
            f"report inputs differ in length: {n} scores, {len(documents)} documents, "
            f"{len(references)} references, {len(predictions)} predictions"
        )
    rank_by = RANK_BY if RANK_BY in rouge_types else rouge_types[0]
    best, worst = _best_and_worst(model.per_example[rank_by])
    cards = _Cards(model, rouge_types, others, words, documents, references, predictions)
    sections = [
        f"<h2>{escape(words.output.capitalize())} lengths (words)</h2>",
        length_histogram(predictions, references, words.output),
        f"<h2>Best {len(best)} examples by {rank_by}</h2>",
        *(cards.card(i) for i in best),
    ]
    if worst:  # fewer examples than two full lists: every one is already shown above
        sections.append(f"<h2>Worst {len(worst)} examples by {rank_by}</h2>")
        sections += [cards.card(i) for i in worst]
    return sections


def report_page(title: str, body: str) -> str:
    """A whole self-contained page around `body` (HTML), in the report's style."""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def facts_line(facts: Mapping[str, str]) -> str:
    """The short "name: value" items shown under a report's title."""
    items = "".join(f"<span><b>{escape(k)}:</b> {escape(v)}</span>" for k, v in facts.items())
    return f'<p class="facts">{items}</p>'


def few_rows_warning(rows: int, split: str) -> str | None:
    """Why `rows` evaluated rows of `split` are too few for the gate to trust (a score it
    compares with a served model's should not rest on a handful of rows in silence); None
    when there are enough (`MIN_EVALUATION_ROWS`, which says why that many)."""
    if rows >= MIN_EVALUATION_ROWS:
        return None
    swing = 100 / max(rows, 1)
    return (
        f"evaluated on {rows} {split} row(s), fewer than the {MIN_EVALUATION_ROWS} a gate can "
        f"trust: one row moves a score by up to {swing:.0f}% of its range and the 95% intervals of "
        "so few rows are too narrow, so the deploy decision rests on noise; give evaluate "
        f"more rows (a larger {split} split in the source, or a higher "
        f"data.max_samples.{split} or evaluate.max_samples)"
    )


def warn_if_few_rows(rows: int, split: str, *, said: bool = False) -> str | None:
    """`few_rows_warning`, also printed as the step's status (the console) when there is
    one and it was not `said` already (by the evaluation of the same rows that the gate's
    scoring of the served version follows); the page shows it too (`warning_line`), so the
    run's report.html opens with it."""
    warning = few_rows_warning(rows, split)
    if warning is not None and not said:
        status(f"warning: {warning}")
    return warning


def warning_line(warning: str | None, *, element: str = "evaluation-warning") -> str:
    """A warning about the whole evaluation, where it is seen first (`element`: the
    paragraph's id); "" when there is none."""
    if warning is None:
        return ""
    return f'<p id="{element}" class="warning"><b>Warning:</b> {escape(warning)}</p>'


def _best_and_worst(scores: np.ndarray) -> tuple[list[int], list[int]]:
    """Indices of the highest scores (best first) and the lowest (worst first), disjoint."""
    # Stable sorts: ties are shown in dataset order, so the page is the same on every run.
    descending = [int(i) for i in np.argsort(-scores, kind="stable")]
    best = descending[:EXAMPLES_EACH]
    ascending = [int(i) for i in np.argsort(scores, kind="stable")]
    taken = set(best)
    worst = [i for i in ascending if i not in taken][:EXAMPLES_EACH]
    return best, worst


@dataclass(frozen=True)
class ScoreRow:
    """One metric's row in the scores table: the model's value (and its interval, when one
    was drawn) and each baseline's, by the baselines' names; a baseline without this metric
    gets empty cells."""

    name: str
    value: float
    interval: tuple[float, float] | None = None
    baselines: Mapping[str, tuple[float, tuple[float, float] | None]] = field(default_factory=dict)
    higher_is_better: bool = True
    #: Decimals shown: 2 for scores ×100 (ROUGE), 3 for fractions 0..1 (F1).
    digits: int = 2


def scores_table(
    rows: Sequence[ScoreRow], baselines: Sequence[str], *, confidence: float, note: str
) -> str:
    """The report's scores table, every task's: a row per metric, the model's value with its
    interval, then each baseline's value and the model's difference from it. `note` (HTML)
    says what the numbers are."""
    level = round(100 * confidence)
    head = f"<th>metric</th><th>model <span class='ci'>[{level}% interval]</span></th>"
    for name in baselines:
        head += f"<th>{escape(name)}</th><th>model − {escape(name)}</th>"
    body = []
    for row in rows:
        cells = f"<td>{escape(row.name)}</td>{_value_cell(row.value, row.interval, row.digits)}"
        for name in baselines:
            if name not in row.baselines:
                cells += "<td></td><td></td>"
                continue
            theirs, interval = row.baselines[name]
            delta = delta_cell(row.value - theirs, row.higher_is_better, row.digits)
            cells += f"{_value_cell(theirs, interval, row.digits)}{delta}"
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<table id="scores"><thead><tr>{head}</tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table><p class="ci">{note}</p>'
    )


def _value_cell(value: float, interval: tuple[float, float] | None, digits: int) -> str:
    shown = f"{value:.{digits}f}"
    if interval is None:
        return f"<td>{shown}</td>"
    low, high = interval
    return f'<td>{shown} <span class="ci">[{low:.{digits}f}, {high:.{digits}f}]</span></td>'


def rouge_rows(
    model: RougeResult,
    baselines: Mapping[str, RougeResult],
    rouge_types: Sequence[str],
    others: Sequence[OtherScore],
) -> list[ScoreRow]:
    """The ROUGE types' rows (with intervals where a bootstrap was run), then `others`'."""

    def interval(result: RougeResult, name: str) -> tuple[float, float] | None:
        # One resample is no bootstrap: there is no interval to show.
        return result.intervals[name] if result.n_resamples > 1 else None

    rows = [
        ScoreRow(
            name,
            model.scores[name],
            interval(model, name),
            {b: (result.scores[name], interval(result, name)) for b, result in baselines.items()},
        )
        for name in rouge_types
    ]
    rows += [
        ScoreRow(
            other.name,
            other.value,
            baselines={b: (value, None) for b, value in other.baselines.items()},
            higher_is_better=other.higher_is_better,
        )
        for other in others
    ]
    return rows


def rouge_note(model: RougeResult, others: Sequence[OtherScore]) -> str:
    """What the ROUGE table's numbers are (HTML), and the notes of the scores beside them."""
    notes = "".join(f" {escape(other.note)}" for other in others if other.note)
    interval = (  # one resample is no bootstrap (`rouge_rows` shows no interval)
        f"intervals: percentile bootstrap of the mean, {model.n_resamples} resamples"
        if model.n_resamples > 1
        else "no intervals (evaluate.bootstrap_samples is 0)"
    )
    return f"ROUGE F1 ×100 (rouge-score definitions); {interval}.{notes}"


def delta_cell(delta: float, higher_is_better: bool = True, digits: int = 2) -> str:
    """A table cell with a model's difference from a baseline, green where it is better."""
    better = delta > 0 if higher_is_better else delta < 0
    worse = delta < 0 if higher_is_better else delta > 0
    tone = "up" if better else "down" if worse else ""
    return f'<td class="{tone}">{delta:+.{digits}f}</td>'


@dataclass(frozen=True)
class _Cards:
    """One example's card: its scores, its input, the reference and what the model wrote."""

    model: RougeResult
    rouge_types: Sequence[str]
    others: Sequence[OtherScore]
    words: ReportWords
    documents: Sequence[str]
    references: Sequence[str]
    predictions: Sequence[str]

    def card(self, i: int) -> str:
        scores = [f"{name} {self.model.per_example[name][i]:.1f}" for name in self.rouge_types]
        scores += [
            f"{other.name} {other.per_example[i]:.1f}"
            for other in self.others
            if other.per_example is not None
        ]
        return (
            f'<div class="ex"><h3>#{i} — {" · ".join(scores)}</h3><dl>'
            f"<dt>{escape(self.words.source)}</dt><dd>{folded_text(self.documents[i])}</dd>"
            f"<dt>reference</dt><dd>{escape(self.references[i])}</dd>"
            f"<dt>{escape(self.words.prediction)}</dt><dd>{escape(self.predictions[i])}</dd></dl></div>"
        )


def folded_text(text: str) -> str:
    """A long text's start, with the whole of it behind an expander."""
    if len(text) <= DOCUMENT_PREVIEW:
        return escape(text)
    # Cut at a space so the preview does not end inside a word.
    cut = text.rfind(" ", 0, DOCUMENT_PREVIEW)
    cut = cut if cut > DOCUMENT_PREVIEW // 2 else DOCUMENT_PREVIEW
    return (
        f"<details><summary>{escape(text[:cut])} … ({len(text):,} characters; show all)</summary>"
        f"{escape(text)}</details>"
    )
