"""Training figures: throughput, achieved FLOP/s and model FLOPs utilisation (MFU).

Pure functions over counts the trainer collects, so the arithmetic is testable on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Dense bf16 tensor-core peaks per GPU in TFLOP/s, from NVIDIA's data sheets (without the 2x of
# structured sparsity). Matched as substrings of `torch.cuda.get_device_name()`, first match
# wins, so specific names come before the families that contain them. None: no bf16 peak
# that can be stated (no bf16 tensor cores, or a variant whose peak NVIDIA does not publish).
BF16_PEAK_TFLOPS: tuple[tuple[str, float | None], ...] = (
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    ("H800", 989.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10G", None),
    ("A10", 125.0),
    ("V100", None),
    ("T4", None),
)


def bf16_peak_tflops(device_name: str) -> float | None:
    """The bf16 dense peak of the GPU called `device_name`, or None when unknown."""
    for fragment, peak in BF16_PEAK_TFLOPS:
        if fragment in device_name:
            return peak
    return None


def training_flops(*, parameters: int, tokens: int) -> float:
    """Training FLOPs estimated as 6 x parameters x tokens.

    The usual estimate (Kaplan et al. 2020), over non-embedding parameters: 2 FLOPs per
    parameter per token forward, 4 backward. It ignores attention's sequence-length term and
    counts every parameter for every token, which for an encoder-decoder overstates the work
    (encoder weights see source tokens, decoder weights target tokens); read it as an
    estimate that is comparable between runs, not as a measurement.
    """
    return 6.0 * parameters * tokens


@dataclass(frozen=True)
class RunCounts:
    """What one training run did, summed over every rank."""

    samples: int
    tokens: int  # non-pad source tokens plus non-ignored label tokens
    seconds: float  # wall time from the first step to the last, this run only
    parameters: int
    world_size: int
    device_name: str | None  # the GPU's name, None on the CPU
    #: What the FLOP estimate counts (embeddings excluded); `parameters` when not given.
    non_embedding_parameters: int | None = None

    @property
    def flop_parameters(self) -> int:
        if self.non_embedding_parameters is None:
            return self.parameters
        return self.non_embedding_parameters


def throughput(counts: RunCounts) -> dict[str, float | None]:
    """samples/s, tokens/s, TFLOP/s (6 x non-embedding params x tokens / s) and MFU (None
    off GPU or on an unknown GPU)."""
    seconds = max(counts.seconds, 1e-9)
    flops_per_s = training_flops(parameters=counts.flop_parameters, tokens=counts.tokens) / seconds
    peak = bf16_peak_tflops(counts.device_name) if counts.device_name else None
    mfu = flops_per_s / (peak * 1e12 * counts.world_size) if peak else None
    return {
        "train_samples_per_second": counts.samples / seconds,
        "train_tokens_per_second": counts.tokens / seconds,
        "train_tflops_per_second": flops_per_s / 1e12,
        "mfu": mfu,
    }


def final_metrics(
    *,
    counts: RunCounts,
    train_loss: float | None,
    eval_loss: float | None,
    global_step: int,
    resumed_from_step: int | None,
) -> dict[str, float | int | None]:
    """The step's metrics dict, as the component logs it."""
    return {
        "train_loss": train_loss,
        "eval_loss": eval_loss,
        "global_step": global_step,
        "resumed_from_step": resumed_from_step,
        "train_samples": counts.samples,
        "train_tokens": counts.tokens,
        "train_runtime_s": counts.seconds,
        "parameters": counts.parameters,
        "non_embedding_parameters": counts.flop_parameters,
        "world_size": counts.world_size,
        **throughput(counts),
    }


def last_logged(history: Sequence[Mapping[str, float]], key: str) -> float | None:
    """The most recent value of `key` in the Trainer's log history."""
    for entry in reversed(history):
        if key in entry:
            return float(entry[key])
    return None
