"""Perplexity of a causal LM on the held-out responses: how surprised it is by the answers.

exp of the token-mean negative log-likelihood over response tokens only (labels other than
-100; the prompt is given, not predicted), with the whole split's tokens pooled: a long
response weighs by its length, as in training's token-mean loss. The sums are taken per
example, so the split can be scored in shards on several ranks and pooled exactly, and each
example's own perplexity goes to predictions.jsonl.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from llm_pipeline.models.generation import longest_first, pad_right

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["ResponseLoss", "perplexity", "response_losses", "response_nll"]

LABEL_PAD = -100
#: (summed negative log-likelihood in nats, response tokens) for one example.
ResponseLoss = tuple[float, int]


def response_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: the summed negative log-likelihood of the labelled tokens, and their count.

    The logits at position t predict the token at t + 1 (a causal LM), so they are scored
    against the labels one place on; computed in fp32 whatever the model's dtype.
    """
    shifted_logits = logits[:, :-1].float()
    targets = labels[:, 1:].to(logits.device)
    nll = torch.nn.functional.cross_entropy(
        shifted_logits.transpose(1, 2), targets, ignore_index=LABEL_PAD, reduction="none"
    )
    return nll.sum(dim=1), (targets != LABEL_PAD).sum(dim=1)


def response_losses(
    model: PreTrainedModel,
    input_ids: Sequence[Sequence[int]],
    labels: Sequence[Sequence[int]],
    *,
    batch_size: int,
    pad_id: int,
) -> list[ResponseLoss]:
    """`response_nll` of each example (the preprocess step's input ids and labels, as the
    model was trained on them), `batch_size` at a time, in input order."""
    device = next(model.parameters()).device
    results: list[ResponseLoss] = [(0.0, 0)] * len(input_ids)
    order = longest_first(input_ids)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            ids, mask = pad_right([input_ids[i] for i in rows], pad_id, device)
            targets, _ = pad_right([labels[i] for i in rows], LABEL_PAD, device)
            logits = cast(Any, model)(input_ids=ids, attention_mask=mask).logits
            sums, counts = response_nll(logits, targets)
            for i, total, count in zip(rows, sums.tolist(), counts.tolist(), strict=True):
                results[i] = (float(total), int(count))
    return results


def perplexity(losses: Sequence[ResponseLoss]) -> float:
    """exp(total NLL / total response tokens); infinite for no tokens at all."""
    tokens = sum(count for _, count in losses)
    if tokens == 0:
        return math.inf
    return math.exp(sum(total for total, _ in losses) / tokens)
