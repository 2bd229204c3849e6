"""How a classifier is evaluated: its label probabilities, scored beside its baselines.

The model's label probabilities become predictions (the most probable label, or each label
at or above the threshold), scored by `classification`. Two baselines go through
the same path: the majority class (the training split's most frequent label, predicted for
every row: `majority_*`) and the model before fine-tuning (`base_*`), as for the other tasks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.report import ReportWords
from llm_pipeline.evaluation.scoring import BASE_MODEL, Scored
from llm_pipeline.evaluation.sharded import sharded
from llm_pipeline.output_files import CONFUSION_MATRIX_FILE
from llm_pipeline.tasks import Task
from llm_pipeline.tasks.text_classification import model as classifier
from llm_pipeline.tasks.text_classification.classification import (
    HEADLINE_METRICS,
    ClassificationScores,
    majority_label,
    majority_predictions,
    predicted_labels,
    score_classification,
)
from llm_pipeline.tasks.text_classification.examples import (
    ClassifierExamples,
    load_classifier_examples,
)
from llm_pipeline.tasks.text_classification.labels import LabelSet
from llm_pipeline.tasks.text_classification.report import (
    ClassifiedRow,
    classifier_scores_table,
    report_sections,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from llm_pipeline.config.model import ModelConfig

__all__ = ["MAJORITY", "ClassifierScorer"]

logger = logging.getLogger(__name__)

#: The majority-class baseline's name in the report (its metrics are prefixed `majority_`).
MAJORITY = "majority class"


class ClassifierScorer:
    """The classifier's part of the evaluate step (`evaluation.scoring.Scorer`): its
    outputs are label probabilities (rows × labels), from one forward pass per batch."""

    run_seconds = "scoring_seconds"
    scoring = "predicted labels"
    #: Always transformers: a classifier's forward pass has no engine to take (`Scorer.engine`).
    engine: Any = None

    def __init__(self, task: Task) -> None:
        self.task = task

    def load_examples(
        self, dataset_dir: str | os.PathLike[str], split: str | None, max_samples: int | None
    ) -> ClassifierExamples:
        return load_classifier_examples(dataset_dir, split, max_samples)

    def load_model(
        self, model_dir: str | os.PathLike[str]
    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        return classifier.load_classifier(model_dir, error=EvaluationError)

    def check_model(
        self,
        model: Any,
        examples: ClassifierExamples,
        model_dir: str | os.PathLike[str],
        dataset_dir: str | os.PathLike[str],
    ) -> ClassifierExamples:
        """The examples with the model's label set, once it is known to be the dataset's
        (the same names in the same id order, single- or multi-label alike)."""
        labels = LabelSet.from_model_config(model.config)
        theirs = examples.labels
        if labels.names != theirs.names or labels.multi_label != theirs.multi_label:
            kind = {False: "single-label", True: "multi-label"}
            raise EvaluationError(
                f"model folder {model_dir} was trained on other labels than dataset "
                f"{dataset_dir} has: {_label_difference(labels, theirs)} (the model's "
                f"{kind[labels.multi_label]} labels {list(labels.names)}, the dataset's "
                f"{kind[theirs.multi_label]} labels {list(theirs.names)}, in id order): "
                "evaluate a model trained on this dataset's preprocess output"
            )
        return dataclasses.replace(examples, labels=labels)

    def base_model(
        self, model: ModelConfig, tokenizer: Any, examples: ClassifierExamples
    ) -> PreTrainedModel:
        """The source with a new head for the labels, initialised from the training seed:
        what scores before fine-tuning is the encoder and a random head."""
        return classifier.build_classifier(model, tokenizer, examples.labels.model_config_fields())

    def run(
        self, model: Any, tokenizer: Any, examples: ClassifierExamples, config: EvaluateConfig
    ) -> np.ndarray | None:
        """The label probabilities of `examples` (rows × labels; rank 0, None on the other
        ranks), `evaluate.batch_size` rows per forward pass."""
        logger.info(
            "scoring the labels of %d examples of split %r: batch %d",
            len(examples.input_ids),
            examples.split,
            config.batch_size,
        )
        # Segment ids go only to a model that takes them (BERT does, DistilBERT does not).
        takes_types = "token_type_ids" in getattr(tokenizer, "model_input_names", ())
        types = examples.token_type_ids if takes_types else None
        input_ids, pad_id = examples.input_ids, int(tokenizer.pad_token_id)

        def produce(rows: list[int]) -> list[list[float]]:
            return classifier.label_probabilities(
                model,
                [input_ids[i] for i in rows],
                batch_size=config.batch_size,
                pad_id=pad_id,
                token_type_ids=[types[i] for i in rows] if types is not None else None,
            )

        lengths = [len(ids) for ids in input_ids]
        probabilities = sharded(lengths, produce, config.batch_size, "label scores")
        return np.asarray(probabilities, dtype=np.float64) if probabilities is not None else None

    def fingerprint_rows(self, examples: ClassifierExamples) -> dict[str, Any]:
        return {
            "split": examples.split,
            "input_ids": examples.input_ids,
            "token_type_ids": examples.token_type_ids,
            "references": examples.references.tolist(),
            "labels": list(examples.labels.names),
        }

    def score(
        self,
        examples: ClassifierExamples,
        outputs: np.ndarray,
        base: np.ndarray | None,
        config: EvaluateConfig,
    ) -> Scored:
        """The model's scores and its baselines' (the majority class, the model before
        fine-tuning) through the same path; confusion_matrix.json beside the predictions."""
        labels = examples.labels
        k, rows = len(labels.names), len(outputs)
        predictions = predicted_labels(
            outputs, multi_label=labels.multi_label, threshold=labels.threshold
        )
        scores = _score(examples, predictions, k, config)
        baselines: dict[str, ClassificationScores] = {}
        baseline_metrics: dict[str, float] = {}
        majority = _majority(examples, labels)
        if majority is not None:
            name = f"{MAJORITY} ({labels.names[majority]})"
            guesses = majority_predictions(
                majority, rows, num_labels=k, multi_label=labels.multi_label
            )
            baselines[name] = _score(examples, guesses, k, config)
            baseline_metrics |= _metrics(baselines[name], "majority_")
        if base is not None:
            base_predictions = predicted_labels(
                base, multi_label=labels.multi_label, threshold=labels.threshold
            )
            baselines[BASE_MODEL] = _score(examples, base_predictions, k, config)
            baseline_metrics |= _metrics(baselines[BASE_MODEL], "base_")
        shown = _rows(examples, labels, outputs, predictions, scores)
        words = ReportWords.of(self.task)
        return Scored(
            model_metrics=_metrics(scores),
            baseline_metrics=baseline_metrics,
            predictions=_predictions(self.task, examples, labels, outputs, shown),
            title=words.title,
            facts={"labels": str(k) + (" (multi-label)" if labels.multi_label else "")},
            table=classifier_scores_table(scores, baselines),
            sections=report_sections(
                model=scores,
                names=labels.names,
                rows=shown,
                train_counts=examples.train_counts,
                multi_label=labels.multi_label,
                words=words,
            ),
            files={
                CONFUSION_MATRIX_FILE: json.dumps(_confusion_payload(labels, scores), indent=2)
                + "\n"
            },
        )


def _label_difference(model: LabelSet, dataset: LabelSet) -> str:
    """What sets the dataset's labels apart from the model's, in a few words: `the dataset
    adds 'numpy'; it lacks 'torch'`."""
    added = [name for name in dataset.names if name not in model.names]
    lacking = [name for name in model.names if name not in dataset.names]
    parts = []
    if added:
        parts.append(f"the dataset adds {', '.join(map(repr, added))}")
    if lacking:
        parts.append(f"{'it' if added else 'the dataset'} lacks {', '.join(map(repr, lacking))}")
    if not parts and model.names != dataset.names:
        parts.append("the same labels in another id order")
    if model.multi_label != dataset.multi_label:
        parts.append(f"the {'model' if model.multi_label else 'dataset'} is multi-label")
    return "; ".join(parts)


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


def _predictions(
    task: Task,
    examples: ClassifierExamples,
    labels: LabelSet,
    probabilities: np.ndarray,
    rows: list[ClassifiedRow],
) -> list[dict[str, Any]]:
    """One JSON object per example, in dataset order: its text, the reference label(s),
    the predicted label(s) with the score, whether it is right, and every label's score."""
    records = []
    for i, row in enumerate(rows):
        probs = [float(p) for p in probabilities[i]]
        record: dict[str, Any] = {"index": i, task.source_label: row.text}
        if row.text_pair is not None:
            record["text_pair"] = row.text_pair
        if labels.multi_label:
            record["reference"] = _names(labels, examples.references[i])
            record["prediction"] = [
                name for name, p in zip(labels.names, probs, strict=True) if p >= labels.threshold
            ]
        else:
            top = int(np.argmax(probs))
            record["reference"] = labels.names[int(examples.references[i])]
            record["prediction"] = labels.names[top]
            record["score"] = probs[top]
        record["correct"] = row.correct
        record["scores"] = dict(zip(labels.names, probs, strict=True))
        records.append(record)
    return records


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
