"""The evaluate step's one path, rank 0's part: the task's scorer scores the model and its
baselines, and this writes predictions, metrics and the report alike for every task.

A task plugs in through `Task.scorer()`, an object with `Scorer`'s methods: how it reads the
evaluation rows, loads and runs a model, and what it makes of the outputs (`Scored`: the
metrics, the prediction rows, the scores table and its own report sections). The tasks
whose model writes text share `TextScorer`: ROUGE on the outputs (the task's ROUGE types in
`ROUGE_TYPES` order, F1 ×100 with bootstrap intervals), the task's other scores beside it
(`extra_scores`), and its baselines (`baseline_texts`; the model before fine-tuning for
every task) through the same path, their metrics prefixed (`lead3_`, `base_`).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation.examples import EvaluationExamples, load_examples
from llm_pipeline.evaluation.report import (
    OtherScore,
    ReportWords,
    render_page,
    rouge_note,
    rouge_rows,
    scores_table,
    text_sections,
    warn_if_few_rows,
)
from llm_pipeline.evaluation.rouge import ROUGE_TYPES, RougeResult, compute_rouge
from llm_pipeline.models.generation import Generated
from llm_pipeline.output_files import EVALUATION_REPORT_FILE, METRICS_FILE, PREDICTIONS_FILE
from llm_pipeline.progress import status
from llm_pipeline.storage import atomic_output_dir
from llm_pipeline.tasks import Task

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from llm_pipeline.config.model import ModelConfig

__all__ = [
    "BASE_MODEL",
    "ExtraScore",
    "ModelOutputs",
    "Scored",
    "Scorer",
    "TextScorer",
    "distinct_share",
    "score_and_write",
    "with_task_defaults",
]

#: The un-fine-tuned model's name among the baselines.
BASE_MODEL = "before fine-tuning"


@dataclass(frozen=True)
class Scored:
    """What a task's scorer makes of one evaluation, for `score_and_write` to write."""

    #: The model's own metrics, first in metrics.json.
    model_metrics: dict[str, float]
    #: The baselines' metrics, prefixed (`base_rougeL`), after the sample count and timings.
    baseline_metrics: dict[str, float]
    #: predictions.jsonl: one JSON object per example, in dataset order.
    predictions: list[dict[str, Any]]
    #: The report's title, its facts between the sample count and the seconds, the scores
    #: table (`report.scores_table`) and the task's sections after it (HTML).
    title: str
    facts: dict[str, str]
    table: str
    sections: list[str]
    #: Other files beside the predictions, by name (a classifier's confusion_matrix.json).
    files: dict[str, str] = field(default_factory=dict)


class Scorer(Protocol):
    """A task's part of the evaluate step (`Task.scorer()`); the step calls these in order."""

    #: The metric that records how long running the model took (`generation_seconds`).
    run_seconds: str
    #: What is scored, for the progress line: "summary outputs", "predicted labels".
    scoring: str
    #: The engine that writes the texts `run` generates where not transformers (the model's
    #: CTranslate2 form, `engines.load_generator`), as the endpoint will; set by the step
    #: for the fine-tuned model's run, None for the model before fine-tuning.
    engine: Any

    def load_examples(
        self, dataset_dir: str | os.PathLike[str], split: str | None, max_samples: int | None
    ) -> Any:
        """The evaluation rows (a `split` and `input_ids` among them); EvaluationError."""

    def load_model(
        self, model_dir: str | os.PathLike[str]
    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        """The fine-tuned model (eval mode) and its tokenizer; EvaluationError."""

    def check_model(self, model: Any, examples: Any, model_dir: Any, dataset_dir: Any) -> Any:
        """`examples` as `model` scores them; EvaluationError if it cannot score them."""

    def base_model(self, model: ModelConfig, tokenizer: Any, examples: Any) -> PreTrainedModel:
        """The model before fine-tuning, built from the recorded `model` settings."""

    def run(self, model: Any, tokenizer: Any, examples: Any, config: EvaluateConfig) -> Any | None:
        """The model's outputs on `examples` (rank 0; None on the other ranks)."""

    def score(
        self, examples: Any, outputs: Any, base: Any | None, config: EvaluateConfig
    ) -> Scored:
        """The model's (and the baselines') scores and what the report shows of them."""

    def fingerprint_rows(self, examples: Any) -> dict[str, Any]:
        """What of `examples` decides the scores (`evaluation.fingerprint`)."""


def with_task_defaults(config: EvaluateConfig, task: Task) -> EvaluateConfig:
    """`config` with the settings it leaves unset (None) taken from the task
    (`Task.evaluation_defaults`: instruction tuning's greedy search, for one)."""
    unset = {k: v for k, v in task.evaluation_defaults.items() if getattr(config, k) is None}
    return config.model_copy(update=unset)


def score_and_write(
    *,
    scorer: Scorer,
    examples: Any,
    outputs: Any,
    config: EvaluateConfig,
    output_dir: Path,
    started: float,
    run_seconds: float,
    base: Any | None = None,
    data_note: str | None = None,
    rows_said: bool = False,
    engine: str | None = None,
) -> dict[str, float]:
    """Score the model and its baselines (`scorer.score`); write predictions, metrics, the
    report and the task's other files (all or nothing); returns the flat metrics.
    `data_note`: what the download step found in the scored split's rows, for the report
    (the step's output said it already). `rows_said`: a warning about the rows was said on
    the console by an earlier evaluation of the same rows (`warn_if_few_rows`). `engine`:
    what wrote the model's texts (`ctranslate2 int8`), for the report."""
    rows = len(examples.input_ids)
    status(f"scoring {rows} {scorer.scoring}")
    warning = warn_if_few_rows(rows, examples.split, said=rows_said)
    scored = scorer.score(examples, outputs, base, config)
    metrics = scored.model_metrics | {
        "samples": float(rows),
        "seconds": time.perf_counter() - started,
        scorer.run_seconds: run_seconds,
    }
    metrics |= scored.baseline_metrics
    facts = {"split": examples.split, "samples": str(rows), **scored.facts}
    if engine is not None:  # what wrote the model's texts, as the endpoint will
        facts["engine"] = engine
    facts["seconds"] = f"{metrics['seconds']:.1f}"
    with atomic_output_dir(output_dir) as staging:
        with (staging / PREDICTIONS_FILE).open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in scored.predictions)
        (staging / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
        for name, text in scored.files.items():
            (staging / name).write_text(text)
        page = render_page(
            scored.title, facts, warning, scored.table, scored.sections, data_note=data_note
        )
        (staging / EVALUATION_REPORT_FILE).write_text(page, encoding="utf-8")
    return metrics


@dataclass(frozen=True)
class ModelOutputs:
    """What a model that writes text produced on the examples: its texts and, for a
    perplexity, the (summed NLL, response tokens) of each reference response."""

    generated: Generated
    losses: list[tuple[float, int]] | None = None


@dataclass(frozen=True)
class ExtraScore:
    """A score a task reports beside ROUGE (exact match, perplexity): its value and each
    example's (None where an example has none)."""

    name: str
    value: float
    per_example: list[float | None]
    higher_is_better: bool = True
    #: What the score is, under the scores table.
    note: str = ""


@dataclass(frozen=True)
class _TextScores:
    """One model's (or baseline's) scores on the evaluation examples."""

    rouge: RougeResult
    extras: list[ExtraScore]


def distinct_share(texts: Sequence[str]) -> float:
    """Share of the texts that are distinct (1.0: all differ; near 0: one text repeated):
    a model that has not learned to read its input writes the same summary for all."""
    return len({" ".join(text.split()) for text in texts}) / max(1, len(texts))


class TextScorer:
    """The scorer of a task whose model writes text; the task's subclass says how the model
    is loaded and run, and adds its scores (`extra_scores`) and baselines (`baseline_texts`)."""

    run_seconds = "generation_seconds"
    #: What writes the texts where not transformers (`Scorer.engine`).
    engine: Any = None
    #: Another engine's texts for the same rows, scored beside the model's as a baseline
    #: (`Scorer.reference`): transformers' float32, beside a quantized engine.
    reference: tuple[str, str, list[str]] | None = None
    #: Whether the examples carry the reference labels (-100 on prompt tokens), for a
    #: perplexity.
    reads_labels = False

    def __init__(self, task: Task) -> None:
        self.task = task
        self.scoring = f"{task.output_label} outputs"
        self.rouge_types = [name for name in ROUGE_TYPES if name in task.metric_names]

    def load_examples(
        self, dataset_dir: str | os.PathLike[str], split: str | None, max_samples: int | None
    ) -> EvaluationExamples:
        return load_examples(dataset_dir, split, max_samples, self.task, labels=self.reads_labels)

    def load_model(
        self, model_dir: str | os.PathLike[str]
    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        raise NotImplementedError

    def check_model(
        self, model: Any, examples: EvaluationExamples, model_dir: Any, dataset_dir: Any
    ) -> EvaluationExamples:
        """Any model that loads writes text for these rows."""
        return examples

    def base_model(
        self, model: ModelConfig, tokenizer: Any, examples: EvaluationExamples
    ) -> PreTrainedModel:
        from llm_pipeline.models.loading import load_model

        return load_model(model, tokenizer, kind=self.task.model_kind)

    def run(
        self, model: Any, tokenizer: Any, examples: EvaluationExamples, config: EvaluateConfig
    ) -> ModelOutputs | None:
        raise NotImplementedError

    def fingerprint_rows(self, examples: EvaluationExamples) -> dict[str, Any]:
        return {
            "split": examples.split,
            "input_ids": examples.input_ids,
            "documents": None,
            "labels": examples.labels,
            "references": examples.references,
        }

    def baseline_texts(
        self, examples: EvaluationExamples, config: EvaluateConfig
    ) -> dict[str, tuple[str, list[str]]]:
        """Baselines scored beside the model, by their names in the report: each one's metric
        prefix and its text for every example."""
        return {}

    def extra_scores(
        self,
        predictions: list[str],
        references: list[str],
        losses: list[tuple[float, int]] | None,
    ) -> list[ExtraScore]:
        """The task's scores beside ROUGE, of one model or baseline (`losses`: None for a
        baseline that is not a model)."""
        return []

    def score(
        self,
        examples: EvaluationExamples,
        outputs: ModelOutputs,
        base: ModelOutputs | None,
        config: EvaluateConfig,
    ) -> Scored:
        generated, references = outputs.generated, examples.references
        scores = self._score(generated.texts, references, outputs.losses, config)
        prefixes: dict[str, str] = {}
        baselines: dict[str, _TextScores] = {}
        named = self.baseline_texts(examples, config)
        if self.reference is not None:
            name, prefix, texts = self.reference
            named[name] = (prefix, texts)
        for name, (prefix, texts) in named.items():
            prefixes[name] = prefix
            baselines[name] = self._score(texts, references, None, config)
        if base is not None:
            prefixes[BASE_MODEL] = "base_"
            baselines[BASE_MODEL] = self._score(
                base.generated.texts, references, base.losses, config
            )
        intervals = config.bootstrap_samples > 0
        model_metrics = self._metrics(scores, intervals)
        model_metrics["distinct_predictions"] = distinct_share(generated.texts)
        model_metrics["gen_len"] = sum(generated.token_counts) / len(generated.token_counts)
        baseline_metrics: dict[str, float] = {}
        for name, baseline in baselines.items():
            baseline_metrics |= self._metrics(baseline, intervals, prefixes[name])
        if base is not None:
            baseline_metrics["base_distinct_predictions"] = distinct_share(base.generated.texts)
        others = [
            OtherScore(
                extra.name,
                extra.value,
                {
                    name: theirs.value
                    for name, baseline in baselines.items()
                    for theirs in baseline.extras
                    if theirs.name == extra.name
                },
                per_example=[math.nan if v is None else v for v in extra.per_example],
                higher_is_better=extra.higher_is_better,
                note=extra.note,
            )
            for extra in scores.extras
        ]
        words = ReportWords.of(self.task)
        rouges = {name: baseline.rouge for name, baseline in baselines.items()}
        return Scored(
            model_metrics=model_metrics,
            baseline_metrics=baseline_metrics,
            predictions=self._rows(
                examples,
                generated,
                scores,
                base=None if base is None else (base.generated.texts, baselines[BASE_MODEL]),
            ),
            title=words.title,
            facts={
                "mean generated tokens": f"{model_metrics['gen_len']:.1f}",
                "distinct predictions": f"{100 * model_metrics['distinct_predictions']:.0f}%",
            },
            table=scores_table(
                rouge_rows(scores.rouge, rouges, self.rouge_types, others),
                list(rouges),
                confidence=scores.rouge.confidence,
                note=rouge_note(scores.rouge, others),
            ),
            sections=text_sections(
                model=scores.rouge,
                documents=examples.documents,
                references=references,
                predictions=generated.texts,
                words=words,
                rouge_types=self.rouge_types,
                others=others,
            ),
        )

    def _score(
        self,
        predictions: list[str],
        references: list[str],
        losses: list[tuple[float, int]] | None,
        config: EvaluateConfig,
    ) -> _TextScores:
        rouge = compute_rouge(
            predictions,
            references,
            use_stemmer=config.use_stemmer,
            # compute_rouge always resamples at least once; 0 means "no interval wanted".
            n_resamples=max(config.bootstrap_samples, 1),
            seed=config.seed,
        )
        return _TextScores(rouge, self.extra_scores(predictions, references, losses))

    def _metrics(self, scores: _TextScores, intervals: bool, prefix: str = "") -> dict[str, float]:
        values: dict[str, float] = {}
        for name in self.rouge_types:
            values[prefix + name] = scores.rouge.scores[name]
            if intervals:
                low, high = scores.rouge.intervals[name]
                values[f"{prefix}{name}_low"], values[f"{prefix}{name}_high"] = low, high
        values |= {prefix + extra.name: extra.value for extra in scores.extras}
        return values

    def _rows(
        self,
        examples: EvaluationExamples,
        generated: Generated,
        scores: _TextScores,
        *,
        base: tuple[list[str], _TextScores] | None = None,
    ) -> list[dict[str, Any]]:
        """Each example with its own scores, as predictions.jsonl holds it; with `base`, the
        un-fine-tuned model's output and scores beside them (`base_`), so that its metrics
        can be checked from the file as the model's can."""
        rows = []
        for i, prediction in enumerate(generated.texts):
            row: dict[str, Any] = {
                "index": i,
                self.task.source_label: examples.documents[i],
                "reference": examples.references[i],
                "prediction": prediction,
                "gen_len": generated.token_counts[i],
            }
            row |= self._example_scores(scores, i)
            if base is not None:
                texts, theirs = base
                row["base_prediction"] = texts[i]
                row |= self._example_scores(theirs, i, prefix="base_")
            rows.append(row)
        return rows

    def _example_scores(self, scores: _TextScores, i: int, prefix: str = "") -> dict[str, Any]:
        """Example `i`'s ROUGE and extra scores, each name after `prefix`."""
        found: dict[str, Any] = {
            prefix + name: float(scores.rouge.per_example[name][i]) for name in self.rouge_types
        }
        return found | {prefix + extra.name: extra.per_example[i] for extra in scores.extras}
