"""Scoring for the evaluate step: ROUGE as rouge-score defines it, sentences, baselines."""

from llm_pipeline.evaluation.baselines import lead_k
from llm_pipeline.evaluation.rouge import (
    ROUGE_TYPES,
    RougeResult,
    bootstrap_interval,
    compute_rouge,
    rougelsum_text,
)
from llm_pipeline.evaluation.sentences import iter_sentences, split_sentences

__all__ = [
    "ROUGE_TYPES",
    "RougeResult",
    "bootstrap_interval",
    "compute_rouge",
    "iter_sentences",
    "lead_k",
    "rougelsum_text",
    "split_sentences",
]
