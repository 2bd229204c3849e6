"""Scoring for the evaluate step: ROUGE as rouge-score defines it, sentences, baselines.

Also the step itself (`evaluate_model`), generation sharded across ranks and the HTML report
(loading a model and generating are `llm_pipeline.models`'); the names that need torch load
on first use, so importing the ROUGE functions stays light.
"""

from typing import TYPE_CHECKING

from llm_pipeline import lazy_exports
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.report import render_report
from llm_pipeline.evaluation.rouge import (
    ROUGE_TYPES,
    RougeResult,
    bootstrap_interval,
    compute_rouge,
    rougelsum_text,
)
from llm_pipeline.evaluation.sentences import iter_sentences, lead_k, split_sentences

if TYPE_CHECKING:
    from llm_pipeline.evaluation.evaluate_model import EvaluationResult, evaluate_model
    from llm_pipeline.evaluation.sharded import generate_sharded

# Names whose modules import torch: loaded on first access.
__getattr__ = lazy_exports(
    __name__,
    {
        "EvaluationResult": "llm_pipeline.evaluation.evaluate_model",
        "evaluate_model": "llm_pipeline.evaluation.evaluate_model",
        "generate_sharded": "llm_pipeline.evaluation.sharded",
    },
)

__all__ = [
    "ROUGE_TYPES",
    "EvaluationError",
    "EvaluationResult",
    "RougeResult",
    "bootstrap_interval",
    "compute_rouge",
    "evaluate_model",
    "generate_sharded",
    "iter_sentences",
    "lead_k",
    "render_report",
    "rougelsum_text",
    "split_sentences",
]
