"""Extractive baselines scored through the same path as a model's summaries."""

from __future__ import annotations

from itertools import islice

from llm_pipeline.evaluation.sentences import iter_sentences

__all__ = ["lead_k"]


def lead_k(document: str, k: int = 3) -> str:
    """The first `k` sentences of `document`, one per line (Lead-3 is the CNN/DM floor).

    One sentence per line is what rougeLsum reads, so the baseline is scored exactly like a
    model output that was split into sentences.
    """
    if not isinstance(document, str):
        raise ValueError(f"lead_k expects a str document, got {type(document).__name__}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return "\n".join(islice(iter_sentences(document), k))
