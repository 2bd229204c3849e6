"""A classifier's scores: accuracy and F1 as scikit-learn computes them, with intervals.

The point values are scikit-learn's own calls (`accuracy_score`, `f1_score` with
`zero_division=0`, `precision_recall_fscore_support`, `confusion_matrix`), as fractions
0..1, so they are the numbers anyone gets from the same predictions. For multi-label
predictions (0/1 indicator matrices) accuracy is scikit-learn's subset accuracy (a row counts
when all of its labels are right) and the F1s are taken over the indicator matrix.

The 95% intervals are percentile bootstraps (`evaluation.bootstrap`, as ROUGE's): each
resample's F1s are computed from its pooled per-label counts, vectorised, by the same
definitions (single-label macro-F1 averages over the labels present in the resample's
references or predictions, as scikit-learn's default does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.metrics import (
    accuracy_score,
    confusion_matrix,
    f1_score,
    multilabel_confusion_matrix,
    precision_recall_fscore_support,
)

from llm_pipeline.evaluation.bootstrap import percentile_bootstrap, resample_counts

__all__ = [
    "HEADLINE_METRICS",
    "PER_CLASS_METRICS",
    "ClassificationScores",
    "PerClass",
    "majority_label",
    "majority_predictions",
    "predicted_labels",
    "score_classification",
]

#: The scores with intervals, in the order `classification_point_values` gives them.
HEADLINE_METRICS: tuple[str, ...] = ("accuracy", "macro_f1", "weighted_f1")


#: Each label's scores, with intervals too.
PER_CLASS_METRICS: tuple[str, ...] = ("precision", "recall", "f1")


@dataclass(frozen=True)
class PerClass:
    """One label's precision, recall and F1 (0..1), its rows among the references, and the
    scores' bootstrap intervals (`{"f1": (low, high)}`; empty when none were drawn)."""

    precision: float
    recall: float
    f1: float
    support: int
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class ClassificationScores:
    """One model's (or baseline's) scores on the evaluation rows.

    `confusion` is scikit-learn's: single-label, a (k × k) matrix of counts with the
    reference label as row and the predicted one as column; multi-label, one (2 × 2) matrix
    per label ([[tn, fp], [fn, tp]]). `correct` says for each row whether its prediction is
    right (all labels right, multi-label).
    """

    scores: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    per_class: list[PerClass]
    confusion: np.ndarray
    correct: np.ndarray
    confidence: float
    n_resamples: int


def predicted_labels(
    probabilities: np.ndarray, *, multi_label: bool, threshold: float
) -> np.ndarray:
    """The labels the scores predict: the most probable label's id per row, or (multi-label)
    a 0/1 row with each label whose score reaches `threshold`."""
    scores = np.asarray(probabilities, dtype=np.float64)
    if multi_label:
        return (scores >= threshold).astype(np.int64)
    return scores.argmax(axis=1).astype(np.int64)


def majority_label(train_counts: dict[str, int], names: Sequence[str]) -> int:
    """The id of the label most frequent in training; a tie goes to the lower id."""
    counts = [train_counts.get(name, 0) for name in names]
    if not any(counts):
        raise ValueError("no training label counts to find the majority label in")
    return int(np.argmax(counts))


def majority_predictions(
    label: int, rows: int, *, num_labels: int, multi_label: bool
) -> np.ndarray:
    """The majority baseline's predictions: `label` for every row (multi-label: the set
    holding that label alone)."""
    if multi_label:
        predictions = np.zeros((rows, num_labels), dtype=np.int64)
        predictions[:, label] = 1
        return predictions
    return np.full(rows, label, dtype=np.int64)


def score_classification(
    references: np.ndarray,
    predictions: np.ndarray,
    *,
    num_labels: int,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> ClassificationScores:
    """Score `predictions` against `references`: label ids (n), or for multi-label 0/1
    indicator matrices (n × num_labels). `n_resamples` 0 skips the intervals."""
    y_true, y_pred = np.asarray(references), np.asarray(predictions)
    multi_label = y_true.ndim == 2
    _check(y_true, y_pred, num_labels)
    labels = list(range(num_labels))
    scores = {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
        "weighted_f1": float(f1_score(y_true, y_pred, average="weighted", zero_division=0)),
    }
    precision, recall, f1, support = precision_recall_fscore_support(
        y_true, y_pred, labels=labels, average=None, zero_division=0
    )
    per_class = [
        PerClass(float(p), float(r), float(f), int(s))
        for p, r, f, s in zip(precision, recall, f1, support, strict=True)
    ]
    if multi_label:
        confusion = multilabel_confusion_matrix(y_true, y_pred, labels=labels)
        correct = (y_true == y_pred).all(axis=1)
    else:
        confusion = confusion_matrix(y_true, y_pred, labels=labels)
        correct = y_true == y_pred
    intervals: dict[str, tuple[float, float]] = {}
    if n_resamples > 0:
        counts = _RowCounts.of(y_true, y_pred, num_labels)
        low, high = percentile_bootstrap(
            lambda idx: counts.scores(resample_counts(idx, len(correct))),
            len(correct),
            n_resamples=n_resamples,
            confidence=confidence,
            seed=seed,
        )
        intervals = {
            name: (float(low[i]), float(high[i])) for i, name in enumerate(HEADLINE_METRICS)
        }
        # Then precision, recall and F1 of label 0..k-1, metric by metric.
        first = len(HEADLINE_METRICS)
        per_class = [
            replace(
                score,
                intervals={
                    name: (
                        float(low[first + m * num_labels + label]),
                        float(high[first + m * num_labels + label]),
                    )
                    for m, name in enumerate(PER_CLASS_METRICS)
                },
            )
            for label, score in enumerate(per_class)
        ]
    return ClassificationScores(
        scores, intervals, per_class, confusion, correct, confidence, n_resamples
    )


def _check(y_true: np.ndarray, y_pred: np.ndarray, num_labels: int) -> None:
    if y_true.shape != y_pred.shape:
        raise ValueError(
            f"references and predictions differ in shape: {y_true.shape} and {y_pred.shape}"
        )
    if y_true.shape[0] == 0:
        raise ValueError("no predictions to score")
    if y_true.ndim == 2 and y_true.shape[1] != num_labels:
        raise ValueError(f"{y_true.shape[1]} label columns for {num_labels} labels")
    if y_true.ndim == 1:
        for name, values in (("references", y_true), ("predictions", y_pred)):
            if values.min() < 0 or values.max() >= num_labels:
                raise ValueError(f"{name} hold label ids outside 0..{num_labels - 1}")


@dataclass(frozen=True)
class _RowCounts:
    """Each row's contribution to the per-label counts the F1s are made of, so that a
    resample's counts are one matrix product with its row weights (b × n)."""

    correct: np.ndarray  # n: 1 for a right row
    true: np.ndarray  # n × k: 1 where the label is a reference label
    predicted: np.ndarray  # n × k: 1 where the label is predicted
    hit: np.ndarray  # n × k: both
    multi_label: bool

    @classmethod
    def of(cls, y_true: np.ndarray, y_pred: np.ndarray, num_labels: int) -> _RowCounts:
        multi_label = y_true.ndim == 2
        if multi_label:
            true, predicted = y_true.astype(np.float64), y_pred.astype(np.float64)
            correct = (y_true == y_pred).all(axis=1)
        else:
            eye = np.eye(num_labels)
            true, predicted = eye[y_true], eye[y_pred]
            correct = y_true == y_pred
        return cls(correct.astype(np.float64), true, predicted, true * predicted, multi_label)

    def scores(self, weights: np.ndarray) -> np.ndarray:
        """(accuracy, macro F1, weighted F1, then each label's precision, recall and F1) of
        each resample, as `score_classification`'s scikit-learn calls define them."""
        rows = weights.sum(axis=1)
        accuracy = weights @ self.correct / rows
        tp, support, predicted = weights @ self.hit, weights @ self.true, weights @ self.predicted
        denominator = support + predicted
        f1 = np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)
        if self.multi_label:
            macro = f1.mean(axis=1)  # every label column counts, as for indicator matrices
        else:
            present = denominator > 0  # labels in the references or the predictions
            macro = (f1 * present).sum(axis=1) / present.sum(axis=1)
        total = support.sum(axis=1)
        weighted = np.divide(
            (f1 * support).sum(axis=1), total, out=np.zeros_like(total), where=total > 0
        )
        precision = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
        recall = np.divide(tp, support, out=np.zeros_like(tp), where=support > 0)
        return np.concatenate(
            [np.stack([accuracy, macro, weighted], axis=1), precision, recall, f1], axis=1
        )
