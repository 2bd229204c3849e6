"""The attention implementation a model trains with on a GPU.

T5's attention (and that of the models built on it: mT5, UMT5, LongT5) adds a learned
relative position bias to its logits. transformers runs T5 on PyTorch's
`scaled_dot_product_attention` by default (`sdpa`), which takes that bias as a float
attention mask, one that needs a gradient while the bias trains. On CUDA in bf16 that path
gave non-finite gradients. Measured on one H100 on 2026-11-26 with
`benchmarks/t5_bf16_steps.py --steps 160 --attention sdpa` and then `eager`. The run used
T5-base's shape, batch 32, at most 512 + 64 tokens, lr 5e-4, the first 5,136 DialogSum rows,
the same seed and no DeepSpeed:

- `sdpa`: 15 of the last 20 steps had non-finite gradients by step 100, and the run stopped
  there (`train/step_health.py`).
- `eager`: the plain `softmax(QK^T + bias) V` ran all 160 steps with none, loss 6.91 -> 3.77,
  at 51,267 tokens/s.

The issue's H200 run (ZeRO-3) skipped 15 of 300 steps in the same way. On the CPU PyTorch
uses another kernel for the same call, and two CPU tries did not reproduce the failure.

So a model whose attention has a learned bias trains with eager attention on a GPU, unless
`model.architecture` names an `attn_implementation` (a user's explicit choice, and the
benchmark's way to run both). `trains_with_eager` is that rule, the one the worker applies and
the fit check counts memory by. Evaluation and serving load the saved model afresh, with
transformers' default: generation takes no gradient, so the failing backward never runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

#: The module T5-style attention keeps its learned position bias in.
LEARNED_BIAS = "relative_attention_bias"
#: The implementation such a model trains with on a GPU.
TRAINING_ATTENTION = "eager"


def has_learned_attention_bias(model: torch.nn.Module) -> bool:
    """Whether `model`'s attention adds a learned bias to its logits (T5's relative position
    bias), which sdpa would take as a mask needing a gradient."""
    return any(name.rsplit(".", 1)[-1] == LEARNED_BIAS for name, _ in model.named_modules())


def trains_with_eager(*, cuda: bool, learned_bias: bool, named: str | None) -> bool:
    """Whether a model trains with eager attention: the implementation `model.architecture`
    names (`named`) when it names one, else eager on CUDA for a learned attention bias."""
    if named is not None:
        return named == TRAINING_ATTENTION
    return cuda and learned_bias


def training_attention(
    model: torch.nn.Module, *, cuda: bool, architecture: Mapping[str, Any] | None
) -> str | None:
    """Switch `model` to eager attention for training where the module docstring says why
    (on CUDA, a learned attention bias, sdpa, no explicit choice); the implementation it now
    uses when switched, else None."""
    config = getattr(model, "config", None)
    named = (architecture or {}).get("attn_implementation")
    if config is None or named is not None:
        return None  # transformers built it with the named implementation
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return None
    if not trains_with_eager(cuda=cuda, learned_bias=has_learned_attention_bias(model), named=None):
        return None
    model.set_attn_implementation(TRAINING_ATTENTION)  # type: ignore[operator]
    logger.info(
        "training %s with %s attention: sdpa's backward with its learned position bias gave "
        "non-finite bf16 gradients on CUDA",
        config.model_type,
        TRAINING_ATTENTION,
    )
    return TRAINING_ATTENTION
