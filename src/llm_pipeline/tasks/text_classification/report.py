"""A classifier's part of the evaluate step's HTML report (`evaluation.report` draws the page
and the scores table every task shares).

Scores with their intervals beside the baselines (the majority class, the model before
fine-tuning), each label's precision, recall and F1, the confusion matrix as a shaded grid,
and examples, wrong ones first. Self-contained like every report page (`report.report_page`):
no scripts, no external assets, all text escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llm_pipeline.evaluation.charts import confusion_matrix_chart, escape
from llm_pipeline.evaluation.report import (
    EXAMPLES_EACH,
    ReportWords,
    ScoreRow,
    folded_text,
    scores_table,
)
from llm_pipeline.tasks.text_classification.classification import (
    HEADLINE_METRICS,
    ClassificationScores,
)

__all__ = ["ClassifiedRow", "classifier_scores_table", "report_sections", "score_rows"]

#: Examples shown: the wrong ones first, then right ones.
EXAMPLES_SHOWN = 2 * EXAMPLES_EACH


@dataclass(frozen=True)
class ClassifiedRow:
    """One example as its card shows it: its texts, its reference label(s) and what the
    model predicted, with the score it gave (multi-label: names and scores joined)."""

    text: str
    text_pair: str | None
    reference: str
    prediction: str
    #: The model's confidence in its prediction (0..1): wrong ones are shown most sure first.
    confidence: float
    correct: bool


def report_sections(
    *,
    model: ClassificationScores,
    names: Sequence[str],
    rows: Sequence[ClassifiedRow],
    train_counts: Mapping[str, int],
    multi_label: bool,
    words: ReportWords,
) -> list[str]:
    """The sections after the scores: per-label scores, the confusion matrix and examples
    (wrong first)."""
    if len(rows) != len(model.correct):
        raise ValueError(f"{len(rows)} rows for {len(model.correct)} scored examples")
    shown = _examples(rows)
    return [
        "<h2>Per label</h2>",
        _per_label_table(model, names, train_counts),
        "<h2>Confusion matrix</h2>",
        _confusion(model, names, multi_label),
        f"<h2>Examples ({sum(not rows[i].correct for i in shown)} wrong shown first)</h2>",
        *(_card(i, rows[i], words) for i in shown),
    ]


def classifier_scores_table(
    model: ClassificationScores, baselines: Mapping[str, ClassificationScores]
) -> str:
    """The scores table: the headline metrics beside the baselines (`majority class`,
    `before fine-tuning`), three decimals."""
    interval = (
        f"intervals: percentile bootstrap, {model.n_resamples} resamples"
        if model.intervals
        else "no intervals (evaluate.bootstrap_samples is 0)"
    )
    return scores_table(
        score_rows(model, baselines),
        list(baselines),
        confidence=model.confidence,
        note=_NOTE.format(interval=interval),
    )


_NOTE = (
    "Fractions 0–1 as scikit-learn computes them: accuracy (multi-label: every label of a row "
    "right), F1 averaged over the labels (macro) or weighted by their rows (weighted), "
    "zero_division=0; {interval}."
)


def score_rows(
    model: ClassificationScores, baselines: Mapping[str, ClassificationScores]
) -> list[ScoreRow]:
    """The headline metrics' rows of the scores table, three decimals (fractions 0..1)."""
    return [
        ScoreRow(
            metric,
            model.scores[metric],
            model.intervals.get(metric),
            {
                name: (baseline.scores[metric], baseline.intervals.get(metric))
                for name, baseline in baselines.items()
            },
            digits=3,
        )
        for metric in HEADLINE_METRICS
    ]


def _per_label_table(
    model: ClassificationScores, names: Sequence[str], train_counts: Mapping[str, int]
) -> str:
    head = "<th>label</th><th>precision</th><th>recall</th><th>F1</th><th>rows</th>"
    if train_counts:
        head += "<th>training rows</th>"
    body = []
    for name, score in zip(names, model.per_class, strict=True):
        values = "".join(
            f"<td>{getattr(score, metric):.3f}{_interval(score.intervals.get(metric))}</td>"
            for metric in ("precision", "recall", "f1")
        )
        cells = f"<td>{escape(name)}</td>{values}<td>{score.support}</td>"
        if train_counts:
            cells += f"<td>{train_counts.get(name, 0)}</td>"
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<table id="per-label"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _interval(bounds: tuple[float, float] | None) -> str:
    if bounds is None:
        return ""
    return f' <span class="ci">[{bounds[0]:.2f}, {bounds[1]:.2f}]</span>'


def _confusion(model: ClassificationScores, names: Sequence[str], multi_label: bool) -> str:
    if not multi_label:
        return (
            '<p class="ci">Rows: the reference label; columns: the predicted one; each cell '
            "the number of examples, darker for more.</p>"
            + confusion_matrix_chart(model.confusion, names, names)
        )
    charts = [
        f'<div style="display:inline-block;margin:0 12px 12px 0"><b>{escape(name)}</b><br>'
        + confusion_matrix_chart(
            matrix,
            ("not", "is"),
            ("not", "is"),
            row_title="reference",
            column_title="predicted",
            svg_id=f"confusion-matrix-{i}",
        )
        + "</div>"
        for i, (name, matrix) in enumerate(zip(names, model.confusion, strict=True))
    ]
    return (
        '<p class="ci">One matrix per label: rows whether a row has the label, columns '
        "whether the model predicts it; darker for more.</p>" + "".join(charts)
    )


def _examples(rows: Sequence[ClassifiedRow]) -> list[int]:
    """Which rows the page shows, in order: wrong ones, the model surest first, then right
    ones, least sure first (ties in dataset order)."""
    confidence = np.array([row.confidence for row in rows])
    wrong = [i for i in np.argsort(-confidence, kind="stable") if not rows[i].correct]
    right = [i for i in np.argsort(confidence, kind="stable") if rows[i].correct]
    return [int(i) for i in [*wrong, *right][:EXAMPLES_SHOWN]]


def _card(i: int, row: ClassifiedRow, words: ReportWords) -> str:
    verdict = "right" if row.correct else "wrong"
    pair = (
        f"<dt>{escape(words.source)} pair</dt><dd>{folded_text(row.text_pair)}</dd>"
        if row.text_pair is not None
        else ""
    )
    return (
        f'<div class="ex {verdict}"><h3>#{i} — {verdict}</h3><dl>'
        f"<dt>{escape(words.source)}</dt><dd>{folded_text(row.text)}</dd>{pair}"
        f"<dt>reference</dt><dd>{escape(row.reference)}</dd>"
        f"<dt>{escape(words.prediction)}</dt><dd>{escape(row.prediction)}</dd></dl></div>"
    )
