"""Preference tuning's part of the evaluate step's HTML report (`evaluation.report` draws
the page and the scores table every task shares).

The scores beside the starting model's, then pairs as cards: the prompt, both answers, each
model's log-probability difference between them (ℓ(chosen) − ℓ(rejected), the policy's and
the reference's) and the reward margin, with the tuned and the starting model's responses.
The pairs the tuned model prefers most beyond the reference come first, then those it
prefers least: where it learned, and where it did not. All text escaped, as on every page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_pipeline.evaluation.charts import escape, length_histogram
from llm_pipeline.evaluation.report import ReportWords, ScoreRow, folded_text, scores_table
from llm_pipeline.tasks.preference_tuning.metrics import PreferenceScores

__all__ = ["PAIRS_EACH", "PairRow", "pair_scores_table", "pair_sections"]

#: Pairs shown at each end of the margin ranking.
PAIRS_EACH = 5
#: Decimals per metric: fractions 0..1 and log-prob margins 3, ROUGE points 2.
_DIGITS = {"rougeL": 2, "rougeL_change": 2}


@dataclass(frozen=True)
class PairRow:
    """One held-out pair as the report and predictions.jsonl show it."""

    prompt: str
    chosen: str
    rejected: str
    #: (ℓ(chosen), ℓ(rejected)): summed token log-probabilities of each answer.
    policy_logps: tuple[float, float]
    reference_logps: tuple[float, float]
    margin: float
    response: str
    start_response: str
    rouge_l: float

    @property
    def policy_gap(self) -> float:
        return self.policy_logps[0] - self.policy_logps[1]

    @property
    def reference_gap(self) -> float:
        return self.reference_logps[0] - self.reference_logps[1]

    def record(self, index: int, source: str) -> dict[str, Any]:
        """The pair's line of predictions.jsonl."""
        return {
            "index": index,
            source: self.prompt,
            "chosen": self.chosen,
            "rejected": self.rejected,
            "prediction": self.response,
            "base_prediction": self.start_response,
            "policy_chosen_logp": self.policy_logps[0],
            "policy_rejected_logp": self.policy_logps[1],
            "reference_chosen_logp": self.reference_logps[0],
            "reference_rejected_logp": self.reference_logps[1],
            "reward_margin": self.margin,
            "rougeL": self.rouge_l,
        }


def pair_scores_table(
    model: PreferenceScores, baselines: Mapping[str, PreferenceScores], n_resamples: int
) -> str:
    """The scores table: each metric with its interval, beside the starting model's."""
    rows = [
        ScoreRow(
            name,
            value,
            model.intervals.get(name),
            {b: (s.metrics[name], s.intervals.get(name)) for b, s in baselines.items()},
            digits=_DIGITS.get(name, 3),
        )
        for name, value in model.metrics.items()
    ]
    drawn = f"{n_resamples} resamples" if n_resamples > 0 else "none drawn"
    note = (
        "Against the reference, the model training started from. reward_margin: mean of "
        "β·[(policy − reference log-prob of chosen) − (the same of rejected)]; "
        "preference_accuracy: share of pairs with a positive margin (a zero margin counts "
        "half, so a model that is its reference scores 0.5); chosen_preferred: share of pairs "
        "whose chosen answer the model itself rates more likely (ties half); rougeL: ROUGE-L "
        "F1 ×100 of the greedy response against the chosen answer; rougeL_change: the model's "
        "rougeL minus the starting model's (the gate's default floor). Intervals: percentile "
        f"bootstrap of the mean, {drawn}."
    )
    return scores_table(rows, list(baselines), confidence=0.95, note=escape(note))


def pair_sections(rows: Sequence[PairRow], words: ReportWords) -> list[str]:
    """The sections after the scores: response lengths, then the pairs with the largest
    and the smallest margins."""
    margins = np.asarray([row.margin for row in rows])
    # Stable sorts: ties in dataset order, the same page on every run. Few pairs are split
    # in halves, so each list holds what its heading says.
    descending = [int(i) for i in np.argsort(-margins, kind="stable")]
    best = descending[: min(PAIRS_EACH, (len(rows) + 1) // 2)]
    worst = [i for i in reversed(descending) if i not in set(best)][:PAIRS_EACH]
    sections = [
        f"<h2>{escape(words.output.capitalize())} lengths (words; the reference: the chosen "
        "answer)</h2>",
        length_histogram(
            [row.response for row in rows], [row.chosen for row in rows], words.output
        ),
        f"<h2>{_pairs(len(best))} with the largest margins (preferred most beyond the "
        "reference)</h2>",
        *(_card(i, rows[i], words) for i in best),
    ]
    if worst:
        sections.append(f"<h2>{_pairs(len(worst))} with the smallest margins</h2>")
        sections += [_card(i, rows[i], words) for i in worst]
    return sections


def _pairs(count: int) -> str:
    return "The pair" if count == 1 else f"The {count} pairs"


def _card(index: int, row: PairRow, words: ReportWords) -> str:
    verdict = "preferred" if row.margin > 0 else "tie" if row.margin == 0 else "not preferred"
    head = (
        f"#{index} — margin {row.margin:+.3f} ({verdict}) · ℓ(chosen) − ℓ(rejected): "
        f"policy {row.policy_gap:+.2f}, reference {row.reference_gap:+.2f} · "
        f"rougeL {row.rouge_l:.1f}"
    )
    logps = (
        f"policy {row.policy_logps[0]:.2f}, reference {row.reference_logps[0]:.2f}",
        f"policy {row.policy_logps[1]:.2f}, reference {row.reference_logps[1]:.2f}",
    )
    return (
        f'<div class="ex pair"><h3>{escape(head)}</h3><dl>'
        f"<dt>{escape(words.source)}</dt><dd>{folded_text(row.prompt)}</dd>"
        f"<dt>chosen</dt><dd>{escape(row.chosen)}"
        f'<br><span class="ci">log-prob: {escape(logps[0])}</span></dd>'
        f"<dt>rejected</dt><dd>{escape(row.rejected)}"
        f'<br><span class="ci">log-prob: {escape(logps[1])}</span></dd>'
        f"<dt>{escape(words.prediction)}</dt><dd>{escape(row.response)}</dd>"
        f"<dt>starting model</dt><dd>{escape(row.start_response)}</dd></dl></div>"
    )
