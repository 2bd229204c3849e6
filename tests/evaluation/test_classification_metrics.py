"""A classifier's scores equal scikit-learn's on the same predictions, intervals included.

The point values are scikit-learn's own calls; the bootstrap recomputes the F1s from pooled
per-label counts, vectorised, and must give scikit-learn's values on every resample.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import (
    accuracy_score,
    confusion_matrix,
    f1_score,
    multilabel_confusion_matrix,
    precision_recall_fscore_support,
)

from llm_pipeline.evaluation.bootstrap import bootstrap_interval, resample_counts
from llm_pipeline.tasks.text_classification.classification import (
    HEADLINE_METRICS,
    _RowCounts,
    majority_label,
    majority_predictions,
    predicted_labels,
    score_classification,
)


def _sklearn(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    return {
        "accuracy": accuracy_score(y_true, y_pred),
        "macro_f1": f1_score(y_true, y_pred, average="macro", zero_division=0),
        "weighted_f1": f1_score(y_true, y_pred, average="weighted", zero_division=0),
    }


def _random_case(
    seed: int, multi_label: bool, rows: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    k, n = int(rng.integers(2, 7)), rows or int(rng.integers(1, 60))
    if multi_label:
        return (rng.random((n, k)) < 0.3).astype(int), (rng.random((n, k)) < 0.3).astype(int), k
    # Predictions right about half the time, so the scores are neither 0 nor 1.
    y_true = rng.integers(0, k, n)
    return y_true, np.where(rng.random(n) < 0.5, y_true, rng.integers(0, k, n)), k


def test_a_hand_checked_case() -> None:
    # sports 0, weather 1, music 2: two rows each.
    scores = score_classification(
        np.array([0, 0, 1, 1, 2, 2]), np.array([0, 1, 1, 1, 2, 0]), num_labels=3, n_resamples=0
    )
    # 4 of 6 right. Label 0: 1 hit of 2 predicted, 2 true: P 1/2, R 1/2, F1 1/2.
    # Label 1: 2 hits of 3 predicted, 2 true: P 2/3, R 1, F1 4/5.
    # Label 2: 1 hit of 1 predicted, 2 true: P 1, R 1/2, F1 2/3.
    assert scores.scores["accuracy"] == pytest.approx(4 / 6)
    f1s = [1 / 2, 4 / 5, 2 / 3]
    assert scores.scores["macro_f1"] == pytest.approx(sum(f1s) / 3)
    assert scores.scores["weighted_f1"] == pytest.approx(sum(f1s) / 3)  # equal supports
    assert [c.precision for c in scores.per_class] == pytest.approx([1 / 2, 2 / 3, 1])
    assert [c.recall for c in scores.per_class] == pytest.approx([1 / 2, 1, 1 / 2])
    assert [c.support for c in scores.per_class] == [2, 2, 2]
    assert [c.f1 for c in scores.per_class] == pytest.approx(f1s)
    assert scores.confusion.tolist() == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    assert scores.correct.tolist() == [True, False, True, True, True, False]
    assert scores.intervals == {}


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_scores_equal_scikit_learns(seed: int, multi_label: bool) -> None:
    y_true, y_pred, k = _random_case(seed, multi_label)
    scores = score_classification(y_true, y_pred, num_labels=k, n_resamples=0)
    assert scores.scores == pytest.approx(_sklearn(y_true, y_pred))
    precision, recall, f1, support = precision_recall_fscore_support(
        y_true, y_pred, labels=list(range(k)), zero_division=0
    )
    assert [c.precision for c in scores.per_class] == pytest.approx(precision)
    assert [c.recall for c in scores.per_class] == pytest.approx(recall)
    assert [c.f1 for c in scores.per_class] == pytest.approx(f1)
    assert [c.support for c in scores.per_class] == support.tolist()
    if multi_label:
        expected = multilabel_confusion_matrix(y_true, y_pred, labels=list(range(k)))
    else:
        expected = confusion_matrix(y_true, y_pred, labels=list(range(k)))
    assert scores.confusion.tolist() == expected.tolist()


def test_a_label_absent_from_references_and_predictions_counts_as_scikit_learn_counts_it() -> None:
    # Single-label: macro-F1 over the labels present (label 2 never appears); multi-label:
    # over every label column, an empty one scoring 0.
    single = score_classification(np.array([0, 1, 1]), np.array([0, 1, 0]), num_labels=3)
    assert single.scores["macro_f1"] == pytest.approx(
        f1_score([0, 1, 1], [0, 1, 0], average="macro", zero_division=0)
    )
    assert single.scores["macro_f1"] == pytest.approx((2 / 3 + 2 / 3) / 2)
    y = np.array([[1, 0, 0], [0, 1, 0]])
    multi = score_classification(y, y, num_labels=3)
    assert multi.scores["macro_f1"] == pytest.approx(2 / 3)
    assert multi.scores["accuracy"] == 1.0


@pytest.mark.parametrize("multi_label", [False, True])
def test_every_resample_is_scored_as_scikit_learn_scores_it(multi_label: bool) -> None:
    y_true, y_pred, k = _random_case(11, multi_label)
    n = len(y_true)
    idx = np.random.default_rng(5).integers(0, n, size=(25, n))
    vectorised = _RowCounts.of(y_true, y_pred, k).scores(resample_counts(idx, n))
    for row, drawn in zip(vectorised, idx, strict=True):
        expected = _sklearn(y_true[drawn], y_pred[drawn])
        per_label = precision_recall_fscore_support(
            y_true[drawn], y_pred[drawn], labels=list(range(k)), average=None, zero_division=0
        )[:3]
        assert row == pytest.approx(
            [expected[name] for name in HEADLINE_METRICS] + [v for m in per_label for v in m]
        )


@pytest.mark.parametrize("multi_label", [False, True])
def test_intervals_bracket_the_scores_and_follow_the_seed(multi_label: bool) -> None:
    y_true, y_pred, k = _random_case(3, multi_label, rows=80)
    first = score_classification(y_true, y_pred, num_labels=k, n_resamples=300, seed=4)
    again = score_classification(y_true, y_pred, num_labels=k, n_resamples=300, seed=4)
    other = score_classification(y_true, y_pred, num_labels=k, n_resamples=300, seed=5)
    assert first.intervals == again.intervals != other.intervals
    for name in HEADLINE_METRICS:
        low, high = first.intervals[name]
        assert 0 <= low <= first.scores[name] <= high <= 1, name
        assert low < high, name
    for label in first.per_class:  # each label's precision, recall and F1 too
        assert set(label.intervals) == {"precision", "recall", "f1"}
        for name, (low, high) in label.intervals.items():
            assert 0 <= low <= high <= 1, name


def test_accuracys_interval_is_the_bootstrap_of_the_mean_of_right_rows() -> None:
    y_true, y_pred, k = _random_case(2, False, rows=80)
    scores = score_classification(y_true, y_pred, num_labels=k, n_resamples=400, seed=9)
    low, high = bootstrap_interval((y_true == y_pred).astype(float), n_resamples=400, seed=9)
    assert scores.intervals["accuracy"] == pytest.approx((float(low), float(high)))


def test_the_majority_label_is_the_most_frequent_in_training_ties_to_the_first() -> None:
    names = ("a", "b", "c")
    assert majority_label({"a": 3, "b": 9, "c": 1}, names) == 1
    assert majority_label({"a": 4, "b": 4, "c": 4}, names) == 0
    assert majority_label({"c": 2}, names) == 2
    with pytest.raises(ValueError, match="no training label counts"):
        majority_label({}, names)


def test_the_majority_baseline_scores_as_a_constant_prediction() -> None:
    y_true = np.array([1, 1, 1, 0, 2, 1, 0])
    guesses = majority_predictions(1, len(y_true), num_labels=3, multi_label=False)
    assert guesses.tolist() == [1] * 7
    scores = score_classification(y_true, guesses, num_labels=3, n_resamples=0)
    assert scores.scores["accuracy"] == pytest.approx(4 / 7)
    # F1 of label 1: 2 · 4 / (4 + 7); the other labels, present only as references, score 0.
    assert scores.scores["macro_f1"] == pytest.approx((8 / 11) / 3)
    multi = majority_predictions(2, 3, num_labels=4, multi_label=True)
    assert multi.tolist() == [[0, 0, 1, 0]] * 3


def test_predicted_labels_take_the_top_score_or_every_score_at_the_threshold() -> None:
    probabilities = np.array([[0.1, 0.7, 0.2], [0.5, 0.2, 0.5], [0.3, 0.3, 0.4]])
    assert predicted_labels(probabilities, multi_label=False, threshold=0.5).tolist() == [1, 0, 2]
    assert predicted_labels(probabilities, multi_label=True, threshold=0.5).tolist() == [
        [0, 1, 0],
        [1, 0, 1],
        [0, 0, 0],
    ]


@pytest.mark.parametrize(
    ("y_true", "y_pred", "message"),
    [
        (np.array([0, 1]), np.array([0]), "differ in shape"),
        (np.array([], dtype=int), np.array([], dtype=int), "no predictions"),
        (np.array([0, 3]), np.array([0, 1]), r"outside 0\.\.2"),
        (np.zeros((2, 2), dtype=int), np.zeros((2, 2), dtype=int), "2 label columns for 3"),
    ],
)
def test_bad_input_is_refused(y_true: np.ndarray, y_pred: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        score_classification(y_true, y_pred, num_labels=3)
