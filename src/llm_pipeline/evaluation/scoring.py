"""Rank 0's part of the evaluate step: score every model and baseline, write the outputs.

What is scored comes from the task's metric names (`Task.metric_names`): its ROUGE types
(in `ROUGE_TYPES` order, F1 ×100 with bootstrap intervals), `exact_match`
(`evaluation.exact_match`, ×100) and `perplexity` (`evaluation.perplexity`). A baseline
(lead-k, where the task has one; the model before fine-tuning) is scored through the same
path and its metrics are prefixed (`lead3_`, `base_`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation.exact_match import ExactMatch, exact_match
from llm_pipeline.evaluation.examples import EvaluationExamples
from llm_pipeline.evaluation.perplexity import ResponseLoss, perplexity
from llm_pipeline.evaluation.report import (
    OtherScore,
    ReportWords,
    render_report,
    warn_if_few_rows,
)
from llm_pipeline.evaluation.rouge import ROUGE_TYPES, RougeResult, compute_rouge
from llm_pipeline.evaluation.runs import ModelOutputs
from llm_pipeline.evaluation.sentences import lead_k
from llm_pipeline.models.generation import Generated
from llm_pipeline.output_files import EVALUATION_REPORT_FILE, METRICS_FILE, PREDICTIONS_FILE
from llm_pipeline.progress import status
from llm_pipeline.storage import atomic_output_dir
from llm_pipeline.tasks import Task

__all__ = ["BASE_MODEL", "Scores", "distinct_share", "score_and_write"]

#: The un-fine-tuned model's name among the baselines.
BASE_MODEL = "before fine-tuning"


@dataclass(frozen=True)
class Scores:
    """One model's (or baseline's) scores on the evaluation examples."""

    rouge: RougeResult
    exact: ExactMatch | None = None
    perplexity: float | None = None
    # Each example's own perplexity (None for one without response tokens).
    perplexities: list[float | None] | None = None


def distinct_share(texts: Sequence[str]) -> float:
    """Share of the texts that are distinct (1.0: all differ; near 0: one text repeated):
    a model that has not learned to read its input writes the same summary for all."""
    return len({" ".join(text.split()) for text in texts}) / max(1, len(texts))


def rouge_types(task: Task) -> list[str]:
    """The task's ROUGE metrics, in the order ROUGE is always reported."""
    return [name for name in ROUGE_TYPES if name in task.metric_names]


def score_and_write(
    *,
    task: Task,
    examples: EvaluationExamples,
    outputs: ModelOutputs,
    config: EvaluateConfig,
    output_dir: Path,
    started: float,
    generation_seconds: float,
    base: ModelOutputs | None = None,
) -> tuple[dict[str, float], RougeResult, RougeResult | None]:
    """Score the model and its baselines, write predictions, metrics and the report (all
    or nothing); returns the flat metrics, the model's ROUGE and the lead-k baseline's."""
    generated = outputs.generated
    status(f"scoring {len(generated.texts)} {task.output_label} outputs")
    warning = warn_if_few_rows(len(generated.texts), examples.split)
    scores = _score(task, generated.texts, examples.references, outputs.losses, config)
    baselines: dict[str, Scores] = {}
    lead_name = f"lead-{config.lead_k}"
    if task.lead_baseline and config.lead_k:
        leads = [lead_k(document, config.lead_k) for document in examples.documents]
        baselines[lead_name] = _score(task, leads, examples.references, None, config)
    if base is not None:
        baselines[BASE_MODEL] = _score(
            task, base.generated.texts, examples.references, base.losses, config
        )
    intervals = config.bootstrap_samples > 0
    metrics = _metrics(task, scores, intervals)
    metrics["distinct_predictions"] = distinct_share(generated.texts)
    metrics["gen_len"] = sum(generated.token_counts) / len(generated.token_counts)
    metrics["samples"] = float(len(generated.texts))
    metrics["seconds"] = time.perf_counter() - started
    metrics["generation_seconds"] = generation_seconds
    if lead_name in baselines:
        metrics |= _metrics(task, baselines[lead_name], intervals, f"lead{config.lead_k}_")
    if base is not None:
        metrics |= _metrics(task, baselines[BASE_MODEL], intervals, prefix="base_")
        metrics["base_distinct_predictions"] = distinct_share(base.generated.texts)
    with atomic_output_dir(output_dir) as staging:
        _write_predictions(staging / PREDICTIONS_FILE, task, examples, generated, scores)
        (staging / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
        page = _report(task, examples, generated.texts, scores, baselines, metrics, warning)
        (staging / EVALUATION_REPORT_FILE).write_text(page, encoding="utf-8")
    lead = baselines.get(lead_name)
    return metrics, scores.rouge, lead.rouge if lead is not None else None


def _score(
    task: Task,
    predictions: list[str],
    references: list[str],
    losses: list[ResponseLoss] | None,
    config: EvaluateConfig,
) -> Scores:
    rouge = compute_rouge(
        predictions,
        references,
        use_stemmer=config.use_stemmer,
        # compute_rouge always resamples at least once; 0 means "no interval wanted".
        n_resamples=max(config.bootstrap_samples, 1),
        seed=config.seed,
    )
    exact = exact_match(predictions, references) if "exact_match" in task.metric_names else None
    if losses is None or "perplexity" not in task.metric_names:
        return Scores(rouge, exact)
    each = [math.exp(total / count) if count else None for total, count in losses]
    return Scores(rouge, exact, perplexity(losses), each)


def _metrics(task: Task, scores: Scores, intervals: bool, prefix: str = "") -> dict[str, float]:
    values: dict[str, float] = {}
    for name in rouge_types(task):
        values[prefix + name] = scores.rouge.scores[name]
        if intervals:
            low, high = scores.rouge.intervals[name]
            values[f"{prefix}{name}_low"], values[f"{prefix}{name}_high"] = low, high
    if scores.exact is not None:
        values[f"{prefix}exact_match"] = scores.exact.score
    if scores.perplexity is not None:
        values[f"{prefix}perplexity"] = scores.perplexity
    return values


def _write_predictions(
    path: Path, task: Task, examples: EvaluationExamples, generated: Generated, scores: Scores
) -> None:
    """One JSON object per example, in dataset order, with its own scores."""
    with path.open("w", encoding="utf-8") as f:
        for i, prediction in enumerate(generated.texts):
            row: dict[str, Any] = {
                "index": i,
                task.source_label: examples.documents[i],
                "reference": examples.references[i],
                "prediction": prediction,
                "gen_len": generated.token_counts[i],
            }
            row |= {name: float(scores.rouge.per_example[name][i]) for name in rouge_types(task)}
            if scores.exact is not None:
                row["exact_match"] = scores.exact.per_example[i]
            if scores.perplexities is not None:
                row["perplexity"] = scores.perplexities[i]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _report(
    task: Task,
    examples: EvaluationExamples,
    texts: list[str],
    scores: Scores,
    baselines: dict[str, Scores],
    metrics: dict[str, float],
    warning: str | None,
) -> str:
    others = []
    if scores.exact is not None:
        others.append(
            OtherScore(
                "exact_match",
                scores.exact.score,
                {n: b.exact.score for n, b in baselines.items() if b.exact is not None},
                per_example=scores.exact.per_example,
                note="exact_match: % of responses equal to their reference once case and "
                "whitespace are normalised.",
            )
        )
    if scores.perplexity is not None:
        others.append(
            OtherScore(
                "perplexity",
                scores.perplexity,
                {n: b.perplexity for n, b in baselines.items() if b.perplexity is not None},
                per_example=[math.nan if p is None else p for p in scores.perplexities or []],
                higher_is_better=False,
                note="perplexity: exp of the mean NLL per reference-response token (lower is "
                "better).",
            )
        )
    return render_report(
        model=scores.rouge,
        baselines={name: b.rouge for name, b in baselines.items()},
        documents=examples.documents,
        references=examples.references,
        predictions=texts,
        words=ReportWords(
            title=task.report_title,
            source=task.source_label,
            output=task.output_label,
            prediction=task.prediction_label,
        ),
        rouge_types=rouge_types(task),
        others=others,
        facts={
            "split": examples.split,
            "samples": str(len(texts)),
            "mean generated tokens": f"{metrics['gen_len']:.1f}",
            "distinct predictions": f"{100 * metrics['distinct_predictions']:.0f}%",
            "seconds": f"{metrics['seconds']:.1f}",
        },
        warning=warning,
    )
