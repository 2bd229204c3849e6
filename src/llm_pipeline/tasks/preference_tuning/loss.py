"""Direct Preference Optimization's loss, and the per-answer log-probabilities it compares.

DPO (Rafailov et al., 2023) needs no reward model: the policy is pushed to raise the chosen
answer's log-probability relative to a frozen reference model more than the rejected one's.
Each answer's log-probability is the sum of its tokens' log-probabilities (the prompt is
masked, labels -100). Both answers go through the model in one forward, chosen rows then
rejected rows, as TRL does: one pass, and under ZeRO-3 one gathering of each layer.

The loss is TRL's (`DPOTrainer._compute_loss`, TRL 1.16; TRL has no standalone loss
function), checked against it on the same batch by tests/tasks/preference_tuning:
- `sigmoid`: -log σ(β·Δ), the paper's loss;
- `ipo`: (Δ/n − 1/(2β))², IPO (Azar et al., 2023) with each answer's log-ratio averaged over
  its tokens, as TRL does after the IPO authors (the sum would grow with answer length);
where Δ is the chosen answer's log-ratio (policy − reference) minus the rejected one's.
"""

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from trl.trainer.utils import selective_log_softmax

from llm_pipeline.tasks.preference_tuning.pairs import IGNORE_INDEX

#: The losses `train.dpo.loss_type` may name.
LOSS_TYPES = ("sigmoid", "ipo")


@dataclass(frozen=True)
class PairLogps:
    """Per pair: each answer's summed token log-probabilities, and its token count."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor


def sequence_logps(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's summed log-probability of its labelled tokens, and how many there are.

    `logits` (batch, length, vocab) are a causal LM's: position t predicts token t + 1, so
    labels shift left by one. The log-softmax is TRL's memory-lean one (a row at a time, or a
    fused kernel on a GPU), since a full (batch, length, vocab) copy is what runs out first.
    """
    labels = labels[:, 1:]
    mask = labels != IGNORE_INDEX
    logps = selective_log_softmax(logits[:, :-1], labels.masked_fill(~mask, 0))
    # Summed in float32 whatever the model's precision: a sum of hundreds of bf16 terms
    # loses the small differences DPO compares.
    return (logps.float() * mask).sum(dim=1), mask.sum(dim=1)


def pair_logps(model: Any, batch: dict[str, torch.Tensor]) -> PairLogps:
    """Both answers' log-probabilities under `model`, from one forward of the concatenated
    batch (collate.py: the chosen rows, then the rejected rows)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logps, tokens = sequence_logps(logits, batch["labels"])
    chosen, rejected = logps.chunk(2)
    chosen_tokens, rejected_tokens = tokens.chunk(2)
    return PairLogps(chosen, rejected, chosen_tokens, rejected_tokens)


def dpo_loss(
    policy: PairLogps,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    *,
    beta: float,
    loss_type: str,
) -> torch.Tensor:
    """The batch's mean DPO loss (`loss_type` one of LOSS_TYPES; β its strength: how far
    the policy may move from the reference, small β far)."""
    chosen_ratio = policy.chosen - ref_chosen
    rejected_ratio = policy.rejected - ref_rejected
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(beta * (chosen_ratio - rejected_ratio))
    elif loss_type == "ipo":
        delta = chosen_ratio / policy.chosen_tokens.clamp(min=1) - rejected_ratio / (
            policy.rejected_tokens.clamp(min=1)
        )
        losses = (delta - 1 / (2 * beta)) ** 2
    else:
        raise ValueError(f"unknown DPO loss type {loss_type!r}; known: {', '.join(LOSS_TYPES)}")
    return losses.mean()


@dataclass(frozen=True)
class PreferenceScores:
    """How far the policy prefers each pair's chosen answer beyond the reference.

    The reward of an answer is β·(policy − reference log-probability), DPO's implicit reward;
    a pair's margin is the chosen answer's reward minus the rejected one's. A pair counts as
    preferred when its margin is positive: the policy prefers chosen over rejected more than
    the reference does. Per-pair values, so evaluation can bootstrap their means.
    """

    margins: torch.Tensor

    @property
    def preferred(self) -> torch.Tensor:
        return self.margins > 0

    @property
    def accuracy(self) -> float:
        return float(self.preferred.float().mean())

    @property
    def mean_margin(self) -> float:
        return float(self.margins.mean())


def preference_scores(
    policy: PairLogps, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor, *, beta: float
) -> PreferenceScores:
    """The pairs' reward margins (see PreferenceScores), detached from the graph."""
    chosen = beta * (policy.chosen - ref_chosen)
    rejected = beta * (policy.rejected - ref_rejected)
    return PreferenceScores(margins=(chosen - rejected).detach())


__all__ = [
    "LOSS_TYPES",
    "PairLogps",
    "PreferenceScores",
    "dpo_loss",
    "pair_logps",
    "preference_scores",
    "sequence_logps",
]
