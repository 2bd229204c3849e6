"""Rank 0's part of evaluating a classifier: score it and its baselines, write the outputs.

The model's label probabilities become predictions (the most probable label, or each label
at or above the threshold), scored by `evaluation.classification`. Two baselines go through
the same path: the majority class (the training split's most frequent label, predicted for
every row: `majority_*`) and the model before fine-tuning (`base_*`), as for the other tasks.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation.classification import (
    HEADLINE_METRICS,
    ClassificationScores,
    majority_label,
    majority_predictions,
    predicted_labels,
    score_classification,
)
from llm_pipeline.evaluation.classifier_examples import ClassifierExamples
from llm_pipeline.evaluation.classifier_report import ClassifiedRow, render_classifier_report
from llm_pipeline.evaluation.report import ReportWords, warn_if_few_rows
from llm_pipeline.evaluation.scoring import BASE_MODEL
from llm_pipeline.output_files import (
    CONFUSION_MATRIX_FILE,
    EVALUATION_REPORT_FILE,
    METRICS_FILE,
    PREDICTIONS_FILE,
)
from llm_pipeline.progress import status
from llm_pipeline.storage import atomic_output_dir
from llm_pipeline.tasks import Task
from llm_pipeline.tasks.text_classification.labels import LabelSet

__all__ = ["MAJORITY", "score_classifier_and_write"]

logger = logging.getLogger(__name__)

#: The majority-class baseline's name in the report (its metrics are prefixed `majority_`).
MAJORITY = "majority class"


def score_classifier_and_write(
    *,
    task: Task,
    examples: ClassifierExamples,
    labels: LabelSet,
    probabilities: np.ndarray,
    config: EvaluateConfig,
    output_dir: Path,
    started: float,
    scoring_seconds: float,
    base: np.ndarray | None = None,
) -> dict[str, float]:
    """Score the model (its `probabilities`, rows × labels) and its baselines; write
    predictions.jsonl, metrics.json, confusion_matrix.json and report.html (all or
    nothing); returns the flat metrics. `labels` is the model's label set."""
    status(f"scoring {len(probabilities)} predicted labels")
    warning = warn_if_few_rows(len(probabilities), examples.split)
    k, rows = len(labels.names), len(probabilities)
    predictions = predicted_labels(
        probabilities, multi_label=labels.multi_label, threshold=labels.threshold
    )
    scores = _score(examples, predictions, k, config)
    baselines: dict[str, ClassificationScores] = {}
    metrics = _metrics(scores)
    metrics |= {
        "samples": float(rows),
        "seconds": time.perf_counter() - started,
        "scoring_seconds": scoring_seconds,
    }
    majority = _majority(examples, labels)
    if majority is not None:
        name = f"{MAJORITY} ({labels.names[majority]})"
        guesses = majority_predictions(majority, rows, num_labels=k, multi_label=labels.multi_label)
        baselines[name] = _score(examples, guesses, k, config)
        metrics |= _metrics(baselines[name], "majority_")
    if base is not None:
        base_predictions = predicted_labels(
            base, multi_label=labels.multi_label, threshold=labels.threshold
        )
        baselines[BASE_MODEL] = _score(examples, base_predictions, k, config)
        metrics |= _metrics(baselines[BASE_MODEL], "base_")
    shown = _rows(examples, labels, probabilities, predictions, scores)
    with atomic_output_dir(output_dir) as staging:
        _write_predictions(staging / PREDICTIONS_FILE, task, examples, labels, probabilities, shown)
        (staging / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
        (staging / CONFUSION_MATRIX_FILE).write_text(
            json.dumps(_confusion_payload(labels, scores), indent=2) + "\n"
        )
        page = render_classifier_report(
            model=scores,
            names=labels.names,
            rows=shown,
            baselines=baselines,
            train_counts=examples.train_counts,
            multi_label=labels.multi_label,
            facts={
                "split": examples.split,
                "samples": str(rows),
                "labels": str(k) + (" (multi-label)" if labels.multi_label else ""),
                "seconds": f"{metrics['seconds']:.1f}",
            },
            words=ReportWords(
                title=task.report_title,
                source=task.source_label,
                output=task.output_label,
                prediction=task.prediction_label,
            ),
            warning=warning,
        )
        (staging / EVALUATION_REPORT_FILE).write_text(page, encoding="utf-8")
    return metrics


def _score(
    examples: ClassifierExamples, predictions: np.ndarray, k: int, config: EvaluateConfig
) -> ClassificationScores:
    return score_classification(
        examples.references,
        predictions,
        num_labels=k,
        n_resamples=config.bootstrap_samples,
        seed=config.seed,
    )


def _metrics(scores: ClassificationScores, prefix: str = "") -> dict[str, float]:
    values: dict[str, float] = {}
    for name in HEADLINE_METRICS:
        values[prefix + name] = scores.scores[name]
        if name in scores.intervals:
            low, high = scores.intervals[name]
            values[f"{prefix}{name}_low"], values[f"{prefix}{name}_high"] = low, high
    return values


def _majority(examples: ClassifierExamples, labels: LabelSet) -> int | None:
    """The training split's most frequent label, or None (with a warning) when the dataset
    does not say how often each label was seen."""
    try:
        return majority_label(examples.train_counts, labels.names)
    except ValueError:
        logger.warning(
            "no training label counts in the dataset (preprocess.json's label_set, or a train "
            "split with labels): the majority-class baseline is left out"
        )
        return None


def _names(labels: LabelSet, row: Any) -> list[str]:
    return [labels.names[j] for j in np.flatnonzero(row)]


def _rows(
    examples: ClassifierExamples,
    labels: LabelSet,
    probabilities: np.ndarray,
    predictions: np.ndarray,
    scores: ClassificationScores,
) -> list[ClassifiedRow]:
    """Each example as the report shows it."""
    shown = []
    for i, text in enumerate(examples.texts):
        probs = probabilities[i]
        pair = examples.text_pairs[i] if examples.text_pairs is not None else None
        correct = bool(scores.correct[i])
        if labels.multi_label:
            chosen = np.flatnonzero(predictions[i])
            reference = ", ".join(_names(labels, examples.references[i])) or "(none)"
            prediction = (
                ", ".join(f"{labels.names[j]} ({probs[j]:.2f})" for j in chosen) or "(none)"
            )
            # How sure the model is of its label set: its least certain label decision.
            confidence = float(np.min(np.maximum(probs, 1 - probs)))
        else:
            top = int(predictions[i])
            reference = labels.names[int(examples.references[i])]
            prediction = f"{labels.names[top]} ({probs[top]:.2f})"
            confidence = float(probs[top])
        shown.append(ClassifiedRow(text, pair, reference, prediction, confidence, correct))
    return shown


def _write_predictions(
    path: Path,
    task: Task,
    examples: ClassifierExamples,
    labels: LabelSet,
    probabilities: np.ndarray,
    rows: list[ClassifiedRow],
) -> None:
    """One JSON object per example, in dataset order: its text, the reference label(s),
    the predicted label(s) with the score, whether it is right, and every label's score."""
    with path.open("w", encoding="utf-8") as f:
        for i, row in enumerate(rows):
            probs = [float(p) for p in probabilities[i]]
            record: dict[str, Any] = {"index": i, task.source_label: row.text}
            if row.text_pair is not None:
                record["text_pair"] = row.text_pair
            if labels.multi_label:
                record["reference"] = _names(labels, examples.references[i])
                record["prediction"] = [
                    name
                    for name, p in zip(labels.names, probs, strict=True)
                    if p >= labels.threshold
                ]
            else:
                top = int(np.argmax(probs))
                record["reference"] = labels.names[int(examples.references[i])]
                record["prediction"] = labels.names[top]
                record["score"] = probs[top]
            record["correct"] = row.correct
            record["scores"] = dict(zip(labels.names, probs, strict=True))
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def _confusion_payload(labels: LabelSet, scores: ClassificationScores) -> dict[str, Any]:
    """The confusion matrix and each label's scores, as confusion_matrix.json holds them."""
    per_label = {
        name: {
            "precision": score.precision,
            "recall": score.recall,
            "f1": score.f1,
            "support": score.support,
            **{
                f"{metric}_{bound}": value
                for metric, interval in score.intervals.items()
                for bound, value in zip(("low", "high"), interval, strict=True)
            },
        }
        for name, score in zip(labels.names, scores.per_class, strict=True)
    }
    if labels.multi_label:
        return {
            "labels": list(labels.names),
            "multi_label": True,
            "layout": "per label: [[true negatives, false positives], "
            "[false negatives, true positives]]",
            "matrices": {
                name: matrix.tolist()
                for name, matrix in zip(labels.names, scores.confusion, strict=True)
            },
            "per_label": per_label,
        }
    return {
        "labels": list(labels.names),
        "multi_label": False,
        "layout": "rows: reference label, columns: predicted label, in `labels` order",
        "matrix": scores.confusion.tolist(),
        "per_label": per_label,
    }
