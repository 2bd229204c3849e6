"""How instruction tuning is scored: a causal LM completes each held-out prompt (greedy by
default, `Task.evaluation_defaults`), its responses are scored by ROUGE-L and exact match
(`exact_match`), and the model's perplexity on the reference responses (`perplexity`) is
taken beside them, token by token, as it was trained."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.examples import EvaluationExamples
from llm_pipeline.evaluation.scoring import ExtraScore, ModelOutputs, TextScorer
from llm_pipeline.evaluation.sharded import complete_split, sharded
from llm_pipeline.models.completion import load_causal_lm
from llm_pipeline.tasks.instruction_tuning.exact_match import exact_match
from llm_pipeline.tasks.instruction_tuning.perplexity import (
    ResponseLoss,
    perplexity,
    response_losses,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from llm_pipeline.config.model import ModelConfig

__all__ = ["InstructionScorer"]


class InstructionScorer(TextScorer):
    """Completions of the prompts as the chat template renders them, scored beside the
    un-fine-tuned model's."""

    reads_labels = True

    def load_model(
        self, model_dir: str | os.PathLike[str]
    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        return load_causal_lm(model_dir, error=EvaluationError)

    def base_model(
        self, model: ModelConfig, tokenizer: Any, examples: EvaluationExamples
    ) -> PreTrainedModel:
        from llm_pipeline.models.decoder_only import build_causal_lm

        return build_causal_lm(model, tokenizer)

    def run(
        self, model: Any, tokenizer: Any, examples: EvaluationExamples, config: EvaluateConfig
    ) -> ModelOutputs | None:
        generated = complete_split(
            model,
            tokenizer,
            examples.documents,
            split=examples.split,
            config=config,
            task=self.task.name,
            engine=self.engine,
        )
        losses = None
        if examples.labels is not None:
            losses = _response_losses_sharded(
                model,
                examples.input_ids,
                examples.labels,
                batch_size=config.batch_size,
                pad_id=int(tokenizer.pad_token_id),
            )
        return ModelOutputs(generated, losses) if generated is not None else None

    def fingerprint_rows(self, examples: EvaluationExamples) -> dict[str, Any]:
        # The model completes the prompt text, and is scored token by token on the ids.
        return super().fingerprint_rows(examples) | {"documents": examples.documents}

    def extra_scores(
        self,
        predictions: list[str],
        references: list[str],
        losses: list[ResponseLoss] | None,
    ) -> list[ExtraScore]:
        exact = exact_match(predictions, references)
        scores = [
            ExtraScore(
                "exact_match",
                exact.score,
                list(exact.per_example),
                note="exact_match: % of responses equal to their reference once case and "
                "whitespace are normalised.",
            )
        ]
        if losses is not None:
            each = [math.exp(total / count) if count else None for total, count in losses]
            scores.append(
                ExtraScore(
                    "perplexity",
                    perplexity(losses),
                    each,
                    higher_is_better=False,
                    note="perplexity: exp of the mean NLL per reference-response token (lower "
                    "is better).",
                )
            )
        return scores


def _response_losses_sharded(
    model: PreTrainedModel,
    input_ids: list[list[int]],
    labels: list[list[int]],
    *,
    batch_size: int,
    pad_id: int,
) -> list[ResponseLoss] | None:
    """`perplexity.response_losses` split across the ranks; rank 0 gets every example's."""

    def produce(rows: list[int]) -> list[ResponseLoss]:
        picked = [input_ids[i] for i in rows], [labels[i] for i in rows]
        return response_losses(model, *picked, batch_size=batch_size, pad_id=pad_id)

    return sharded([len(ids) for ids in input_ids], produce, batch_size, "response losses")
