"""Training figures: throughput, achieved FLOP/s and model FLOPs utilisation (MFU).

Pure functions over counts the trainer collects, so the arithmetic is testable on its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Dense bf16 tensor-core peaks per GPU in TFLOP/s, from NVIDIA's data sheets (without the 2x of
# structured sparsity). Matched as whole words of `torch.cuda.get_device_name()` (so "L4" is not
# found in "NVIDIA L40", nor "H200" in "GH200"), first match wins, so specific names come before
# the families that contain them. None: no bf16 peak that can be stated (no bf16 tensor cores,
# or a variant whose peak NVIDIA does not publish).
BF16_PEAK_TFLOPS: tuple[tuple[str, float | None], ...] = (
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("GH200", 989.0),
    ("H200 NVL", 835.0),
    ("H200", 989.0),  # SXM
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    ("H800", 989.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10G", None),
    ("A10", 125.0),
    ("V100", None),
    ("T4", None),
)


def bf16_peak_tflops(device_name: str) -> float | None:
    """The bf16 dense peak of the GPU called `device_name`, or None when unknown."""
    for fragment, peak in BF16_PEAK_TFLOPS:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(fragment)}(?![A-Za-z0-9])", device_name):
            return peak
    return None


@dataclass(frozen=True)
class FlopParameters:
    """Matmul parameters by the tokens that pass through them (`train.counts.flop_parameters`).

    An encoder-decoder reads the source with its encoder and the target with its decoder. The
    decoder's cross-attention projects the encoder's output, so its key and value projections
    run once per source token; its queries, outputs, self-attention, feed-forward layers and the
    output projection (LM head) once per target token. A decoder-only model (a causal LM) puts
    all of its parameters on the source side: every input token passes through all of them,
    and its target (response) tokens are among those inputs.
    """

    per_source_token: int
    per_target_token: int

    @property
    def total(self) -> int:
        return self.per_source_token + self.per_target_token


def training_flops(*, parameters: FlopParameters, source_tokens: int, target_tokens: int) -> float:
    """Model FLOPs of training: 6 per parameter per token that passes through it.

    2 FLOPs per weight per token forward (a multiply and an add) and 4 backward (the gradients
    of the input and of the weight), Kaplan et al. (2020), with each weight charged only for
    the tokens it sees (`FlopParameters`): charging every parameter for every source and
    target token overstates T5's work about twice over at 512 source and 128 target tokens.
    Counted: every matmul weight, and the LM head, which is a matmul per target token.
    Not counted: input embedding lookups (no matmul); attention's score and weighted-sum
    products, which grow with the square of the length (for T5-small at 512/128 tokens 13%
    more); norms, softmax and activations; padding tokens; and the forward pass that
    gradient checkpointing recomputes (hardware FLOPs, not model FLOPs). So MFU here is
    model FLOPs utilisation in the usual sense, comparable between runs and settings.
    """
    return 6.0 * (
        parameters.per_source_token * source_tokens + parameters.per_target_token * target_tokens
    )


@dataclass(frozen=True)
class RunCounts:
    """What one training run did, summed over every rank."""

    samples: int
    # non-pad tokens read: the encoder's input, or a decoder-only model's whole sequence
    source_tokens: int
    # label tokens trained on (not the ignored ones): a seq2seq decoder's target, or the
    # response tokens of a decoder-only model, which are also among its source tokens
    target_tokens: int
    seconds: float  # wall time from the first step to the last, this run only
    total_parameters: int  # every parameter of the model, LoRA adapters included
    trainable_parameters: int  # those the optimizer updates: all, or the adapters alone
    flop_parameters: FlopParameters
    world_size: int
    device_name: str | None  # the GPU's name, None on the CPU
    decoder_only: bool = False
    # the most GPU memory any rank's caching allocator held (bytes), None on the CPU
    peak_memory_reserved: int | None = None
    # wall time from the end of the last warm-up step (the first, or a later one that
    # compiled: `counts.Clock`) to the end of the last, the steps in it, and this run's
    # optimizer steps; None and 0 where unknown or no step came after warm-up
    steady_seconds: float | None = None
    steps: int = 0
    steady_steps: int = 0
    # on a GPU, the share of the step after warm-up the host spent issuing it
    # (`counts.Clock`), the largest of any rank's; None off a GPU
    host_share: float | None = None

    @property
    def tokens(self) -> int:
        """Tokens the model processed: source plus target, or a decoder-only model's input
        tokens alone (its targets are among them)."""
        return self.source_tokens if self.decoder_only else self.source_tokens + self.target_tokens


def throughput(counts: RunCounts) -> dict[str, float | None]:
    """samples/s, tokens/s, model TFLOP/s (`training_flops`) and MFU (None off GPU or on an
    unknown GPU)."""
    seconds = max(counts.seconds, 1e-9)
    flops = training_flops(
        parameters=counts.flop_parameters,
        source_tokens=counts.source_tokens,
        target_tokens=counts.target_tokens,
    )
    flops_per_s = flops / seconds
    peak = bf16_peak_tflops(counts.device_name) if counts.device_name else None
    mfu = flops_per_s / (peak * 1e12 * counts.world_size) if peak else None
    figures: dict[str, float | None] = {
        "train_samples_per_second": counts.samples / seconds,
        "train_tokens_per_second": counts.tokens / seconds,
        "train_tflops_per_second": flops_per_s / 1e12,
        "mfu": mfu,
    }
    if counts.steady_seconds and 0 < counts.steady_steps < counts.steps:
        # After warm-up: the warm-up steps' share of the work taken off, as if every step
        # were the same size (packed rows are; padded ones are on average).
        share = counts.steady_steps / counts.steps / counts.steady_seconds
        figures["train_steady_tokens_per_second"] = counts.tokens * share
        figures["train_steady_tflops_per_second"] = flops * share / 1e12
        figures["train_warm_up_steps"] = counts.steps - counts.steady_steps
    return figures


def final_metrics(
    *,
    counts: RunCounts,
    train_loss: float | None,
    eval_loss: float | None,
    global_step: int,
    resumed_from_step: int | None,
    skipped_steps: int,
    nonfinite_steps: int,
    figures: Mapping[str, float | None] | None = None,
) -> dict[str, float | int | None]:
    """The step's metrics dict, as the component logs it.

    `figures`: what a task's loss logs beside the loss (`Task.training_figures`, DPO's
    rewards), their last logged values, named `train_<figure>` in training and
    `eval_<figure>` in evaluation.

    `skipped_steps`: optimizer steps of this run whose update was not applied (DeepSpeed's
    overflow skips, fp16's GradScaler); `nonfinite_steps`: those whose gradient norm was inf
    or NaN, skipped or (the plain Trainer in bf16 or fp32) applied (`train.step_health`).
    """
    return {
        "train_loss": train_loss,
        "eval_loss": eval_loss,
        "global_step": global_step,
        "resumed_from_step": resumed_from_step,
        "skipped_steps": skipped_steps,
        "nonfinite_steps": nonfinite_steps,
        "train_samples": counts.samples,
        "train_tokens": counts.tokens,
        "train_source_tokens": counts.source_tokens,
        "train_target_tokens": counts.target_tokens,
        "train_runtime_s": counts.seconds,
        "total_parameters": counts.total_parameters,
        "trainable_parameters": counts.trainable_parameters,
        "parameters_per_source_token": counts.flop_parameters.per_source_token,
        "parameters_per_target_token": counts.flop_parameters.per_target_token,
        "world_size": counts.world_size,
        "peak_gpu_memory_reserved_bytes": counts.peak_memory_reserved,
        "step_host_share": counts.host_share,
        **throughput(counts),
        **(figures or {}),
    }


def last_logged(history: Sequence[Mapping[str, float]], key: str) -> float | None:
    """The most recent value of `key` in the Trainer's log history."""
    for entry in reversed(history):
        if key in entry:
            return float(entry[key])
    return None
