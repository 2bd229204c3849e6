"""How summarization is scored: a seq2seq model's summaries by ROUGE (`TextScorer`), beside
the lead-k baseline, the first `evaluate.lead_k` sentences of each document: the floor a
summarizer must beat on news, where the opening sentences say the most."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.examples import EvaluationExamples
from llm_pipeline.evaluation.scoring import ModelOutputs, TextScorer
from llm_pipeline.evaluation.sentences import lead_k
from llm_pipeline.evaluation.sharded import generate_sharded, log_generation
from llm_pipeline.models.generation import build_generation_config, load_seq2seq

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["SummarizationScorer"]


class SummarizationScorer(TextScorer):
    """Summaries written by beam search (the model's generation config, `evaluate`'s
    settings over it), scored by the task's ROUGE types."""

    def load_model(
        self, model_dir: str | os.PathLike[str]
    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        return load_seq2seq(model_dir, error=EvaluationError)

    def run(
        self, model: Any, tokenizer: Any, examples: EvaluationExamples, config: EvaluateConfig
    ) -> ModelOutputs | None:
        generation = build_generation_config(model, tokenizer, config)
        log_generation(len(examples.input_ids), examples.split, generation, config, self.task.name)
        generated = generate_sharded(
            model, tokenizer, examples.input_ids, config=config, engine=self.engine
        )
        return ModelOutputs(generated) if generated is not None else None

    def baseline_texts(
        self, examples: EvaluationExamples, config: EvaluateConfig
    ) -> dict[str, tuple[str, list[str]]]:
        if not config.lead_k:
            return {}
        leads = [lead_k(document, config.lead_k) for document in examples.documents]
        return {f"lead-{config.lead_k}": (f"lead{config.lead_k}_", leads)}
