"""What every estimate shares: bytes per dtype and per device, a batch's lengths, a sum of
named parts, and a process's own memory before any model.

Two things differ between a CPU and a CUDA process, and the `Kernels` below say how:

* dropout: on CPU torch keeps a mask in the activation dtype; CUDA keeps a 1-byte mask;
* attention: on CPU, an attention with a float bias or dropout (T5's, GPT-2's) runs SDPA's
  math path, which keeps q, k, v and the probabilities in fp32 plus dropout's mask and
  output for every score; on CUDA the memory-efficient SDPA kernel keeps q, k, v, the output
  and only the bias it is given per score. A causal attention without dropout (Llama, OPT)
  runs a flash kernel on both, which keeps q, k, v, the output and one fp32 log-sum-exp per
  head and token.

A T5-style model (a learned position bias) trains on CUDA with eager attention instead
(`models.attention`: SDPA's backward gave non-finite bf16 gradients there), which keeps more
per score: `eager_score_bytes`.

The CUDA side cannot be measured on this machine; its constants follow from the kernels'
documented saved tensors. One H100 run (2026-11-26, before the eager switch) measured peaks of
0.84-0.99 of the finetune estimates they give.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GIB = 2**30
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
DeviceKind = Literal["cpu", "cuda"]

#: A CPU process's own memory before any model: the interpreter, torch, transformers,
#: DeepSpeed, datasets, tokenizers and their first-use buffers. Measured on this project's
#: stack by `benchmarks/memory.py --fit` (its "runtime" column, RSS before the model).
CPU_RUNTIME_GIB = {"train": 0.5, "generate": 0.4}
#: A CUDA process's GPU memory besides tensors: CUDA context, cuBLAS workspaces, NCCL and
#: allocator rounding (unverified here: no GPU).
CUDA_RUNTIME_GIB = 1.0
#: A CUDA process's host memory before any model: as on CPU plus the CUDA libraries it maps
#: (unverified here: no GPU).
CUDA_HOST_RUNTIME_GIB = 3.0


@dataclass(frozen=True)
class Breakdown:
    """Bytes by part, in the order they are shown."""

    parts: tuple[tuple[str, float], ...]

    @property
    def total(self) -> float:
        return sum(value for _, value in self.parts)

    def part(self, name: str) -> float:
        return sum(value for label, value in self.parts if label == name)

    def describe(self) -> str:
        """`weights 20.5 + cache 48.0` (GiB, one decimal)."""
        return " + ".join(f"{name} {value / GIB:.1f}" for name, value in self.parts if value)


@dataclass(frozen=True)
class Kernels:
    """Bytes PyTorch keeps per element, where they depend on the device (module docstring)."""

    mask: float | None  # dropout mask; None: the activation dtype's size
    attention: float | None  # q, k, v, attention output; None: the activation dtype's
    scores: float | None  # per attention score in training; None: the activation dtype's
    scores_dropout: float | None  # the same with attention dropout
    scores_inference: float | None  # per score while generating, beside the dtype's bias
    causal_scores_dropout: float  # per head and score, a causal attention with dropout


DEVICES: dict[DeviceKind, Kernels] = {
    # SDPA's math path in fp32: probabilities 4 B, then dropout's mask 4 B and output 4 B.
    "cpu": Kernels(
        mask=None,
        attention=4,
        scores=4,
        scores_dropout=12,
        scores_inference=8,
        causal_scores_dropout=12,
    ),
    # Memory-efficient SDPA: the bias only; its dropout keeps an RNG offset, not a mask.
    "cuda": Kernels(
        mask=1,
        attention=None,
        scores=None,
        scores_dropout=None,
        scores_inference=0,
        causal_scores_dropout=0,
    ),
}


def eager_score_bytes(dtype_bytes: int, dropout: bool) -> float:
    """Bytes a T5 attention trained with eager attention on CUDA keeps per score.

    Adding the fp32 position bias makes the scores fp32, so the softmax keeps its fp32
    output (4 B). The product with the values keeps its 16-bit copy under autocast (the
    dtype's size; in fp32 it is the softmax's output itself). Dropout adds its 1-byte mask
    on CUDA, and the product then keeps the dropout's output in place of the softmax's.
    Measured on the CPU with saved_tensors_hooks, where only the mask's size differs:
    6 B in bf16 and 4 B in fp32 without dropout, against the 2 B the memory-efficient
    kernel keeps for the bias alone (tests/fit/test_estimates.py).
    """
    copy = 0 if dtype_bytes == 4 and not dropout else dtype_bytes
    return 4 + copy + (1 if dropout else 0)


def kernel_bytes(value: float | None, dtype_bytes: int) -> float:
    """A `Kernels` figure, where None means the activation dtype's size."""
    return float(dtype_bytes) if value is None else value


@dataclass(frozen=True)
class Lengths:
    """One micro-batch (or generation batch): rows, and tokens per sequence.

    A seq2seq model reads `source` tokens and writes `target`; a causal LM's sequence
    (prompt and response together) is `source`, with `target` 0. A row is one sequence but
    for a task that runs several through the model per row (`per_row`, the task's
    `fit_sequences_per_row`: DPO's chosen and rejected answers); activations are estimated
    for all of them (`sequences`), while `batch` stays the rows a config sets.
    """

    batch: int
    source: int
    target: int
    per_row: int = 1

    @property
    def sequences(self) -> int:
        """The sequences the model runs at once: rows × sequences per row."""
        return self.batch * self.per_row


def runtime_bytes(device: DeviceKind, kind: Literal["train", "generate"]) -> float:
    """The process's own memory on its device (module constants)."""
    return (CPU_RUNTIME_GIB[kind] if device == "cpu" else CUDA_RUNTIME_GIB) * GIB
