"""Running a model over the evaluation examples, as its kind needs (`Task.model_kind`).

A seq2seq model writes a summary of each input (`generate_sharded`); a causal LM completes
each prompt text (`complete_sharded`, left-padded, greedy by default) and, where its task
reports a perplexity, is also scored token by token on the reference responses
(`response_losses_sharded`); a classifier scores each input's labels in one forward pass
(`label_probabilities_sharded`, no generation). All go through the sharding of
`evaluation.generate`: every rank runs its share, rank 0 gets everything.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation.classifier_examples import ClassifierExamples
from llm_pipeline.evaluation.examples import EvaluationExamples
from llm_pipeline.evaluation.generate import (
    Generated,
    build_generation_config,
    complete_sharded,
    generate_sharded,
    label_probabilities_sharded,
    load_causal_lm,
    load_classifier,
    load_seq2seq,
    response_losses_sharded,
)
from llm_pipeline.evaluation.perplexity import ResponseLoss
from llm_pipeline.models.completion import CompletionSettings, completion_config
from llm_pipeline.tasks import Task

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "ModelOutputs",
    "classify",
    "completion_settings",
    "load_for_evaluation",
    "run_model",
    "with_task_defaults",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelOutputs:
    """What one model produced on the examples: its texts and, for a perplexity, the
    (summed NLL, response tokens) of each reference response."""

    generated: Generated
    losses: list[ResponseLoss] | None = None


def with_task_defaults(config: EvaluateConfig, task: Task) -> EvaluateConfig:
    """`config` with the settings it leaves unset (None) taken from the task
    (`Task.evaluation_defaults`: instruction tuning's greedy search, for one)."""
    unset = {k: v for k, v in task.evaluation_defaults.items() if getattr(config, k) is None}
    return config.model_copy(update=unset)


def completion_settings(config: EvaluateConfig) -> CompletionSettings:
    """The `evaluate` settings a causal LM's completions take."""
    return CompletionSettings(
        batch_size=config.batch_size,
        max_new_tokens=config.max_new_tokens,
        min_new_tokens=config.min_new_tokens,
        num_beams=config.num_beams,
        length_penalty=config.length_penalty,
        no_repeat_ngram_size=config.no_repeat_ngram_size,
        do_sample=bool(config.do_sample),
        temperature=config.temperature,
        top_p=config.top_p,
        stop=tuple(config.stop or ()),
    )


def load_for_evaluation(
    model_dir: str | os.PathLike[str], task: Task
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The fine-tuned model in `model_dir`, loaded for the task's kind of model."""
    if task.model_kind == "causal_lm":
        return load_causal_lm(model_dir)
    if task.model_kind == "classifier":
        return load_classifier(model_dir)
    return load_seq2seq(model_dir)


def run_model(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: EvaluationExamples,
    config: EvaluateConfig,
    task: Task,
) -> ModelOutputs | None:
    """The model's outputs on `examples` (rank 0; None on the other ranks)."""
    _log_settings(examples, _generation(model, tokenizer, config, task), config, task)
    if task.model_kind == "seq2seq":
        generated = generate_sharded(model, tokenizer, examples.input_ids, config=config)
        return ModelOutputs(generated) if generated is not None else None
    settings = completion_settings(config)
    generated = complete_sharded(model, tokenizer, examples.documents, settings=settings)
    losses = None
    if examples.labels is not None:
        losses = response_losses_sharded(
            model,
            examples.input_ids,
            examples.labels,
            batch_size=config.batch_size,
            pad_id=int(tokenizer.pad_token_id),
        )
    return ModelOutputs(generated, losses) if generated is not None else None


def classify(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: ClassifierExamples,
    config: EvaluateConfig,
) -> np.ndarray | None:
    """The classifier's label probabilities for `examples` (rows × labels; rank 0, None on
    the other ranks), `evaluate.batch_size` rows per forward pass."""
    logger.info(
        "scoring the labels of %d examples of split %r: batch %d",
        len(examples.input_ids),
        examples.split,
        config.batch_size,
    )
    # Segment ids go only to a model that takes them (BERT does, DistilBERT does not).
    takes_types = "token_type_ids" in getattr(tokenizer, "model_input_names", ())
    probabilities = label_probabilities_sharded(
        model,
        examples.input_ids,
        batch_size=config.batch_size,
        pad_id=int(tokenizer.pad_token_id),
        token_type_ids=examples.token_type_ids if takes_types else None,
    )
    return np.asarray(probabilities, dtype=np.float64) if probabilities is not None else None


def _generation(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    config: EvaluateConfig,
    task: Task,
) -> GenerationConfig:
    if task.model_kind == "seq2seq":
        return build_generation_config(model, tokenizer, config)
    return completion_config(model, tokenizer, completion_settings(config))


def _log_settings(
    examples: EvaluationExamples, generation: GenerationConfig, config: EvaluateConfig, task: Task
) -> None:
    # What actually runs, after falling back to the task's defaults and the model's config.
    logger.info(
        "generating for %d examples of split %r (%s): batch %d, max_new_tokens %s (max_length %s), "
        "min_new_tokens %s, num_beams %s, length_penalty %s, no_repeat_ngram_size %s%s",
        len(examples.input_ids),
        examples.split,
        task.name,
        config.batch_size,
        generation.max_new_tokens,
        generation.max_length,
        generation.min_new_tokens,
        generation.num_beams,
        generation.length_penalty,
        generation.no_repeat_ngram_size,
        (
            f", do_sample {generation.do_sample}, temperature {generation.temperature}, "
            f"top_p {generation.top_p}, stop {generation.stop_strings}"
            if task.model_kind == "causal_lm"
            else ""
        ),
    )
