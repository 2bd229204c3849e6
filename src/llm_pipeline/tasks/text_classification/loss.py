"""A classifier's loss, by its head's problem type, and the class weights that balance it.

Single-label heads take cross-entropy over the labels; multi-label heads a binary
cross-entropy per label (a sigmoid each), as transformers' own heads do for their
`problem_type`. The loss is taken here rather than by the model so that it can be weighted
and so that it divides like the other kinds' losses (`trainer.token_mean_loss`): each rank
sums its rows' losses and divides by the rows of the whole step over every micro-batch and
rank (the Trainer's `num_items_in_batch`: the labels that are not -100, so rows for a
single-label head and rows x labels for a multi-label one), so N processes compute the
gradient one process would on the same global batch.

`train.class_weights: "balanced"` weighs the labels by the training split's counts:

* single-label: label c's rows weigh `rows / (labels x rows of c)`, scikit-learn's
  `compute_class_weight("balanced")`. The weighted sum is divided by the rows, not by the sum
  of the batch's weights (PyTorch's weighted mean): over the training split the weights
  average 1, so the loss stays on the unweighted scale and its division stays the same on
  every rank.
* multi-label: each label's positives weigh `negatives / positives` of that label in the
  training split (`BCEWithLogitsLoss`' `pos_weight`), so a rare label's few positives count
  as much as its many negatives. The per-label analogue of "balanced", and what PyTorch's
  documentation suggests for it.

A label without training rows (or, multi-label, without positives or without negatives)
cannot be balanced; that is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from llm_pipeline.errors import TrainError
from llm_pipeline.tasks.text_classification.labels import LabelSet

__all__ = ["balanced_class_weights", "classifier_loss", "label_counts"]


def label_counts(labels: Sequence[Any], label_set: LabelSet) -> np.ndarray:
    """Training rows per label (single-label: ids; multi-label: 0/1 rows summed)."""
    if label_set.multi_label:
        matrix = np.asarray(labels, dtype=np.float64).reshape(-1, len(label_set.names))
        return matrix.sum(axis=0)
    ids = np.asarray(labels, dtype=np.int64)
    return np.bincount(ids, minlength=len(label_set.names)).astype(np.float64)


def balanced_class_weights(labels: Sequence[Any], label_set: LabelSet) -> torch.Tensor:
    """`train.class_weights: "balanced"` for the training split's `labels` column (see the
    module's docstring): per-label weights (single-label) or positive weights (multi-label).

    Raises TrainError naming the labels that cannot be balanced."""
    counts = label_counts(labels, label_set)
    rows = len(labels)
    if label_set.multi_label:
        negatives = rows - counts
        hopeless = [
            f"{name!r} ({int(c)} of {rows} rows)"
            for name, c, n in zip(label_set.names, counts, negatives, strict=True)
            if c == 0 or n == 0
        ]
        if hopeless:
            raise TrainError(
                "train.class_weights 'balanced': labels that every training row has, or none "
                f"has, cannot be balanced: {', '.join(hopeless)}; drop them from data.labels "
                "or set train.class_weights to null"
            )
        return torch.tensor(negatives / counts, dtype=torch.float32)
    absent = [name for name, c in zip(label_set.names, counts, strict=True) if c == 0]
    if absent:
        raise TrainError(
            f"train.class_weights 'balanced': {len(absent)} label(s) have no training rows to "
            f"weigh ({', '.join(repr(n) for n in absent)}); drop them from data.labels or set "
            "train.class_weights to null"
        )
    return torch.tensor(rows / (len(label_set.names) * counts), dtype=torch.float32)


def classifier_loss(
    *, multi_label: bool, weights: torch.Tensor | None = None, label_smoothing: float = 0.0
) -> Callable[..., torch.Tensor]:
    """The Trainer's `compute_loss_func` for a classifier head (see the module's docstring).

    `weights`: per-label weights (single-label) or positive weights (multi-label), or None.
    `label_smoothing` smooths cross-entropy's targets, and a multi-label target y to
    y(1 - s) + s/2.
    """

    def loss(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
        logits = (outputs["logits"] if isinstance(outputs, dict) else outputs[0]).float()
        labels = labels.to(logits.device)
        weight = weights.to(logits.device) if weights is not None else None
        if multi_label:
            targets = labels.float() * (1 - label_smoothing) + label_smoothing / 2
            total = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, targets, pos_weight=weight, reduction="sum"
            )
            count = num_items_in_batch if num_items_in_batch is not None else labels.numel()
        else:
            total = torch.nn.functional.cross_entropy(
                logits,
                labels.long(),
                weight=weight,
                reduction="sum",
                label_smoothing=label_smoothing,
            )
            count = num_items_in_batch if num_items_in_batch is not None else labels.shape[0]
        return total / count

    return loss
