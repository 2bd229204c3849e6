"""The metrics preference tuning is scored by, on held-out pairs, each against the model
the run started from (the *reference*: DPO's log-ratios are taken against it).

Per pair i, with ℓ(a) an answer's summed token log-probability after the prompt (loss.py's
`pair_logps`, the prompt masked) and β the run's `train.dpo.beta`:

- margin_i = β·[(ℓ_policy(chosen) − ℓ_ref(chosen)) − (ℓ_policy(rejected) − ℓ_ref(rejected))],
  DPO's implicit reward of the chosen answer minus the rejected one's;
- `preference_accuracy`: the mean of 1 where margin_i > 0 (the policy prefers the chosen
  answer more than the reference does), ½ where margin_i = 0, 0 below. A model that is its
  reference has every margin exactly 0 and scores 0.5, chance: the no-preference value;
- `reward_margin`: the mean margin_i (0 with no preference);
- `chosen_preferred`: the share of pairs where the model's own ℓ(chosen) > ℓ(rejected)
  (ties ½), needing no reference, so the starting model has a figure of its own to compare;
- `rougeL`: ROUGE-L F1 ×100 of the model's completion of each prompt against `chosen`;
- `rougeL_change`: the model's rougeL minus the starting model's on the same prompts: the
  gate's default floor (`Task.gate_floors`), so a model that learns to prefer but talks
  worse is not deployed.

Each gets a 95% percentile-bootstrap interval (`evaluation.bootstrap`), all from one set of
resamples of the pairs (so `rougeL_change`'s is paired, over the per-prompt differences).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llm_pipeline.evaluation.bootstrap import bootstrap_interval
from llm_pipeline.evaluation.rouge import RougeResult

__all__ = ["PreferenceScores", "preference_scores"]


@dataclass(frozen=True)
class PreferenceScores:
    """One model's metrics (the module's definitions) and what each pair contributed."""

    metrics: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    margins: np.ndarray
    rouge: RougeResult


def _ties_half(values: np.ndarray) -> np.ndarray:
    """1 where a value is positive, ½ where it is 0, 0 below: a preference count in which
    no preference is chance."""
    return np.where(values > 0, 1.0, np.where(values == 0, 0.5, 0.0))


def preference_scores(
    own: np.ndarray,
    reference: np.ndarray,
    rouge: RougeResult,
    start_rouge: RougeResult,
    *,
    beta: float,
    n_resamples: int,
    seed: int,
) -> PreferenceScores:
    """The module's metrics of a model whose pairs' log-probabilities are `own` (n × 2:
    chosen, rejected) against a `reference`'s, and whose completions scored `rouge` where
    the starting model's scored `start_rouge`; intervals when `n_resamples` > 0."""
    own_gap = own[:, 0] - own[:, 1]
    margins = beta * (own_gap - (reference[:, 0] - reference[:, 1]))
    rouge_l = rouge.per_example["rougeL"]
    columns = {
        "preference_accuracy": _ties_half(margins),
        "reward_margin": margins,
        "chosen_preferred": _ties_half(own_gap),
        "rougeL": rouge_l,
        "rougeL_change": rouge_l - start_rouge.per_example["rougeL"],
    }
    metrics = {name: float(np.mean(values)) for name, values in columns.items()}
    intervals: dict[str, tuple[float, float]] = {}
    if n_resamples > 0:
        # One set of resamples for every metric: rougeL_change's is the paired interval.
        names = list(columns)
        low, high = bootstrap_interval(
            np.stack([columns[name] for name in names], axis=1), n_resamples=n_resamples, seed=seed
        )
        intervals = {
            name: (float(lo), float(hi)) for name, lo, hi in zip(names, low, high, strict=True)
        }
    return PreferenceScores(metrics, intervals, margins, rouge)
