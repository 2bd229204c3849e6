"""How preference tuning is scored: held-out pairs, as DPO itself measures them, and the
completions a user would be served, each beside the model the run started from.

The tuned model (the *policy*) and the model it started from (`model.source`, rebuilt as
`evaluate.score_base_model` rebuilds it; it always runs for this task,
`Task.needs_base_model`) each score every pair's two answers in one forward (chosen and
rejected rows together, as training does) and complete every prompt greedily; `metrics`
defines what is made of them. The starting model is scored by the same functions against
itself (`base_*`): accuracy 0.5, margin 0 and change 0 by definition, and its own
`chosen_preferred` and `rougeL`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.examples import PREPROCESS_FIRST, read_split
from llm_pipeline.evaluation.report import ReportWords
from llm_pipeline.evaluation.rouge import RougeResult, compute_rouge
from llm_pipeline.evaluation.scoring import BASE_MODEL, Scored, distinct_share
from llm_pipeline.evaluation.sharded import complete_split, sharded
from llm_pipeline.models.completion import load_causal_lm
from llm_pipeline.models.generation import Generated
from llm_pipeline.output_files import RESOLVED_CONFIG_FILE
from llm_pipeline.tasks import Task
from llm_pipeline.tasks.preference_tuning.collate import PairCollator
from llm_pipeline.tasks.preference_tuning.loss import pair_logps
from llm_pipeline.tasks.preference_tuning.metrics import PreferenceScores, preference_scores
from llm_pipeline.tasks.preference_tuning.report import PairRow, pair_scores_table, pair_sections

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from llm_pipeline.config.model import ModelConfig

__all__ = [
    "DEFAULT_BETA",
    "PreferenceExamples",
    "PreferenceOutputs",
    "PreferenceScorer",
]

logger = logging.getLogger(__name__)

#: β when the model folder records none (TRL's `DPOConfig.beta` default).
DEFAULT_BETA = 0.1
_NO_BETA = "TRL's default; the model folder records no train.dpo.beta"
#: The columns of a pair the log-probabilities are taken on (preprocess.py's).
PAIR_COLUMNS = tuple(
    f"{answer}_{name}"
    for answer in ("chosen", "rejected")
    for name in ("input_ids", "attention_mask", "labels")
)
_TEXTS = ("prompt", "chosen", "rejected")
#: What of a collated batch the model reads (the rest: precomputed reference log-probs).
_MODEL_INPUTS = ("input_ids", "attention_mask", "labels")


@dataclass(frozen=True)
class PreferenceExamples:
    """The held-out pairs: the rendered prompt (what is completed), both answers' texts,
    the prompt's ids (`input_ids`: what every scorer's rows are counted by) and each pair's
    token columns (PAIR_COLUMNS)."""

    split: str
    prompts: list[str]
    chosen: list[str]
    rejected: list[str]
    input_ids: list[list[int]]
    pairs: list[dict[str, list[int]]]


@dataclass(frozen=True)
class PreferenceOutputs:
    """One model's outputs: each pair's (ℓ(chosen), ℓ(rejected)) and its completions."""

    logps: np.ndarray
    generated: Generated


class PreferenceScorer:
    """Preference tuning's part of the evaluate step (`evaluation.scoring.Scorer`): each
    pair's answers scored by the model in one forward (chosen and rejected rows together,
    as training does), and its greedy completions of the prompts."""

    run_seconds = "generation_seconds"
    scoring = "preference pairs and responses"
    #: What writes the completions where not transformers (`Scorer.engine`).
    engine: Any = None

    def __init__(self, task: Task) -> None:
        self.task = task
        # The model folder's β, once `load_model` has read it.
        self.beta, self.beta_source = DEFAULT_BETA, _NO_BETA

    def load_examples(
        self, dataset_dir: str | os.PathLike[str], split: str | None, max_samples: int | None
    ) -> PreferenceExamples:
        needed = dict.fromkeys(("prompt_input_ids", *PAIR_COLUMNS), PREPROCESS_FIRST)
        needed |= dict.fromkeys(_TEXTS, PREPROCESS_FIRST)
        name, table, _ = read_split(dataset_dir, split, max_samples, needed, references="chosen")
        columns = {column: table[column] for column in PAIR_COLUMNS}
        pairs = [
            {column: list(values[i]) for column, values in columns.items()}
            for i in range(len(table))
        ]
        return PreferenceExamples(
            split=name,
            prompts=[str(text) for text in table["prompt"]],
            chosen=[str(text) for text in table["chosen"]],
            rejected=[str(text) for text in table["rejected"]],
            input_ids=[list(ids) for ids in table["prompt_input_ids"]],
            pairs=pairs,
        )

    def load_model(
        self, model_dir: str | os.PathLike[str]
    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        loaded = load_causal_lm(model_dir, error=EvaluationError)
        self.beta, self.beta_source = _recorded_beta(Path(model_dir))
        return loaded

    def check_model(
        self, model: Any, examples: PreferenceExamples, model_dir: Any, dataset_dir: Any
    ) -> PreferenceExamples:
        """The pairs, once every token id is one the model has: ids of another tokenizer
        would fail deep in the forward (a device-side assert on a GPU)."""
        vocabulary = int(model.get_input_embeddings().num_embeddings)
        highest = max(
            max(pair["chosen_input_ids"] + pair["rejected_input_ids"]) for pair in examples.pairs
        )
        if highest >= vocabulary:
            raise EvaluationError(
                f"dataset {dataset_dir} holds token id {highest}, but the model in {model_dir} "
                f"has {vocabulary} token embeddings: the pairs were tokenized for another "
                "model; evaluate a model trained on this dataset's preprocess output"
            )
        return examples

    def base_model(
        self, model: ModelConfig, tokenizer: Any, examples: PreferenceExamples
    ) -> PreTrainedModel:
        """The reference: the model the run started from, as training loaded it."""
        from llm_pipeline.models.decoder_only import build_causal_lm

        return build_causal_lm(model, tokenizer)

    def run(
        self, model: Any, tokenizer: Any, examples: PreferenceExamples, config: EvaluateConfig
    ) -> PreferenceOutputs | None:
        """Each pair's answers' log-probabilities, then the completions (rank 0; None on
        the other ranks), both split across the ranks (`evaluation.sharded.sharded`)."""
        logps = _pair_logps_sharded(
            model, examples.pairs, batch_size=config.batch_size, pad_id=int(tokenizer.pad_token_id)
        )
        generated = complete_split(
            model,
            tokenizer,
            examples.prompts,
            split=examples.split,
            config=config,
            task=self.task.name,
            engine=self.engine,
        )
        if logps is None or generated is None:
            return None
        return PreferenceOutputs(np.asarray(logps, dtype=np.float64), generated)

    def fingerprint_rows(self, examples: PreferenceExamples) -> dict[str, Any]:
        # The prompts completed and the pairs scored decide every metric.
        return {
            "split": examples.split,
            "input_ids": examples.input_ids,
            "documents": examples.prompts,
            "references": examples.chosen,
            "pairs": examples.pairs,
        }

    def score(
        self,
        examples: PreferenceExamples,
        outputs: PreferenceOutputs,
        base: PreferenceOutputs | None,
        config: EvaluateConfig,
    ) -> Scored:
        """The tuned model's metrics against the starting model (`base`, which must be
        there: every metric is relative to it) and the starting model's own."""
        if base is None:
            raise EvaluationError(
                f"{self.task.name} is scored against the model the run started from, and it "
                "was not run: the evaluate step runs it for this task (Task.needs_base_model)"
            )

        def rouge(texts: list[str]) -> RougeResult:
            return compute_rouge(
                texts,
                examples.chosen,
                use_stemmer=config.use_stemmer,
                n_resamples=1,  # the intervals are drawn with the others', below
                seed=config.seed,
            )

        rouge_tuned, rouge_start = rouge(outputs.generated.texts), rouge(base.generated.texts)
        scores = functools.partial(
            preference_scores,
            beta=self.beta,
            n_resamples=config.bootstrap_samples,
            seed=config.seed,
        )
        tuned = scores(outputs.logps, base.logps, rouge_tuned, rouge_start)
        start = scores(base.logps, base.logps, rouge_start, rouge_start)
        generated = outputs.generated
        model_metrics = _flat(tuned)
        model_metrics["distinct_predictions"] = distinct_share(generated.texts)
        model_metrics["gen_len"] = sum(generated.token_counts) / len(generated.token_counts)
        baseline_metrics = _flat(start, "base_")
        baseline_metrics["base_distinct_predictions"] = distinct_share(base.generated.texts)
        rows = _pair_rows(examples, outputs, base, tuned)
        words = ReportWords.of(self.task)
        return Scored(
            model_metrics=model_metrics,
            baseline_metrics=baseline_metrics,
            predictions=[row.record(i, self.task.source_label) for i, row in enumerate(rows)],
            title=words.title,
            facts={
                "beta": f"{self.beta:g} ({self.beta_source})",
                "mean generated tokens": f"{model_metrics['gen_len']:.1f}",
            },
            table=pair_scores_table(tuned, {BASE_MODEL: start}, config.bootstrap_samples),
            sections=pair_sections(rows, words),
        )


def _flat(scores: PreferenceScores, prefix: str = "") -> dict[str, float]:
    values: dict[str, float] = {}
    for name, value in scores.metrics.items():
        values[prefix + name] = value
        if name in scores.intervals:
            low, high = scores.intervals[name]
            values[f"{prefix}{name}_low"], values[f"{prefix}{name}_high"] = low, high
    return values


def _pair_rows(
    examples: PreferenceExamples,
    outputs: PreferenceOutputs,
    base: PreferenceOutputs,
    tuned: PreferenceScores,
) -> list[PairRow]:
    return [
        PairRow(
            prompt=examples.prompts[i],
            chosen=examples.chosen[i],
            rejected=examples.rejected[i],
            policy_logps=(float(outputs.logps[i, 0]), float(outputs.logps[i, 1])),
            reference_logps=(float(base.logps[i, 0]), float(base.logps[i, 1])),
            margin=float(tuned.margins[i]),
            response=outputs.generated.texts[i],
            start_response=base.generated.texts[i],
            rouge_l=float(tuned.rouge.per_example["rougeL"][i]),
        )
        for i in range(len(examples.input_ids))
    ]


def _recorded_beta(model_dir: Path) -> tuple[float, str]:
    """The β the model was trained with (its folder's recorded `train.dpo.beta`), and where
    it came from; TRL's default when the folder records none (a model trained elsewhere)."""
    try:
        payload = json.loads((model_dir / RESOLVED_CONFIG_FILE).read_text(encoding="utf-8"))
        beta = payload["train"]["dpo"]["beta"]
    except (OSError, ValueError, KeyError, TypeError):
        logger.warning(
            "%s records no train.dpo.beta: reward margins use beta %g",
            model_dir / RESOLVED_CONFIG_FILE,
            DEFAULT_BETA,
        )
        return DEFAULT_BETA, _NO_BETA
    return float(beta), "train.dpo.beta, as the model was trained"


def _pair_logps_sharded(
    model: Any, pairs: list[dict[str, list[int]]], *, batch_size: int, pad_id: int
) -> list[tuple[float, float]] | None:
    """Each pair's (ℓ(chosen), ℓ(rejected)) under `model`, split across the ranks; rank 0
    gets every pair's (loss.py's `pair_logps`: one forward per batch of pairs)."""
    collate = PairCollator(pad_id=pad_id)
    device = next(model.parameters()).device

    def produce(rows: list[int]) -> list[tuple[float, float]]:
        batch = collate([pairs[i] for i in rows])
        inputs = {name: batch[name].to(device) for name in _MODEL_INPUTS}
        with torch.inference_mode():
            logps = pair_logps(model, inputs)
        return list(zip(logps.chosen.tolist(), logps.rejected.tolist(), strict=True))

    lengths = [len(pair["chosen_input_ids"]) + len(pair["rejected_input_ids"]) for pair in pairs]
    return sharded(lengths, produce, batch_size, "pair log-probabilities")
