"""Optimizer steps that were lost: skipped, or taken with non-finite gradients.

Two ways a step is lost, and neither says so in the Trainer's logs:

* DeepSpeed skips a step whose gradients hold inf or NaN (`OVERFLOW! Skipping step`): in
  bf16 and fp32 when its gradient norm is not finite (runtime/zero/stage3.py `step`:
  `is_invalid_grad_norm`), in fp16 also while its loss scaler searches for a scale. The
  weights stay as they were; its engine counts these in `skipped_steps`.
* The plain Trainer in bf16 or fp32 does not skip: a non-finite gradient reaches the
  weights (and Adam's moments), and every step after it is non-finite too. Only fp16's
  GradScaler skips such a step.

`StepHealth` counts both for one run (since its start or resume) without reading the
device every step: the gradient norm the Trainer computes anyway is compared on the device,
and the counters are read back once per logging period (`read`), when the Trainer reads
the loss back too. What DeepSpeed decides it has already read back itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from llm_pipeline.errors import TrainError

#: How many of the latest optimizer steps `lost_steps_error` looks at, and
RECENT_STEPS = 20
#: more than this many of them lost stops the run. Why so: a healthy bf16 or fp32 run loses
#: none and one bad batch loses one or two, well below it. fp16's loss scaler skips one step
#: per halving of its scale from 2^16 (DeepSpeed one more for its hysteresis), so eleven
#: skips among twenty steps leave a scale of 2^6 or less: gradients overflowing fp16 even so, a
#: run failing, not settling. On the plain Trainer a non-finite step has already damaged
#: the weights and every later step is lost too, so the rule holds eleven steps after the
#: damage, and the run stops instead of training on NaN to its end. A share of a window
#: rather than a run of consecutive steps: a run that skips every other step is lost too.
#: Checked at each logging step (when the counts are read), over the steps before it.
MOST_OF_RECENT = RECENT_STEPS // 2

LIKELY_CAUSES = (
    "a learning rate too high for this model and batch (train.learning_rate), fp16's "
    'narrow range (train.precision: use "bf16" or "fp32"), or rows with extreme values '
    "or no label tokens (the data)"
)


@dataclass(frozen=True)
class StepCounts:
    """A run's lost optimizer steps so far, as read at a logging step."""

    steps: int  # optimizer steps recorded in this run
    skipped: int  # steps whose update was not applied
    nonfinite: int  # steps whose gradient norm was inf or NaN (applied or skipped)
    recent_lost: int  # of the last RECENT_STEPS steps, those skipped or non-finite
    skips_nonfinite: bool = False  # non-finite steps are skipped (else applied)

    def as_logs(self) -> dict[str, float]:
        """Counts for the Trainer's log entry (floats, as the Trainer's logs hold)."""
        return {"skipped_steps": float(self.skipped), "nonfinite_steps": float(self.nonfinite)}


class StepHealth:
    """Counters of lost steps: `record` each optimizer step, `read` at logging time.

    `skips_nonfinite`: a non-finite step is skipped, not applied (DeepSpeed, or fp16's
    GradScaler). `scaler_skips`: the plain Trainer's GradScaler does the skipping and
    reports nothing, so its non-finite steps are its skipped ones (DeepSpeed's engine
    reports its own, passed to `record`).
    """

    def __init__(self, *, skips_nonfinite: bool = False, scaler_skips: bool = False) -> None:
        self.skips_nonfinite = skips_nonfinite or scaler_skips
        self.scaler_skips = scaler_skips
        self.steps = 0
        self.skipped = 0  # host-side: DeepSpeed's decisions, already read back by DeepSpeed
        self._nonfinite = torch.zeros((), dtype=torch.long)
        self._recent = torch.zeros(RECENT_STEPS, dtype=torch.bool)

    def record(self, grad_norm: torch.Tensor | float | None, *, skipped: bool = False) -> None:
        """One optimizer step: its gradient norm as the Trainer computed it (a device
        tensor, or a float under DeepSpeed, None where it computes none) and whether the
        step was skipped (DeepSpeed's engine says so)."""
        if isinstance(grad_norm, torch.Tensor):
            bad = ~torch.isfinite(grad_norm.detach())  # stays on the device: no sync
        else:
            bad = torch.tensor(grad_norm is not None and not math.isfinite(grad_norm))
        device = bad.device
        self._nonfinite = self._nonfinite.to(device) + bad
        self._recent = self._recent.to(device)
        self._recent[self.steps % RECENT_STEPS] = bad | skipped
        self.steps += 1
        self.skipped += int(skipped)

    def read(self) -> StepCounts:
        """The counts so far: one read from the device."""
        nonfinite, recent = torch.stack([self._nonfinite, self._recent.sum()]).tolist()
        skipped = self.skipped + (nonfinite if self.scaler_skips else 0)
        return StepCounts(
            steps=self.steps,
            skipped=skipped,
            nonfinite=nonfinite,
            recent_lost=recent,
            skips_nonfinite=self.skips_nonfinite,
        )


def skipped_so_far(engine: Any) -> int | None:
    """DeepSpeed's own count of skipped steps (`DeepSpeedEngine.skipped_steps`, which its
    `_take_model_step` raises when the optimizer reports an overflow), None without one."""
    count = getattr(engine, "skipped_steps", None)
    return count if isinstance(count, int) else None


def lost_steps_warning(
    *, steps: int, skipped: int, nonfinite: int, skipped_total: int, nonfinite_total: int
) -> str | None:
    """The status line for a logging period of `steps` steps that lost some (`skipped`,
    `nonfinite` in the period; the totals for the run so far), None for one that lost none."""
    if skipped > 0:
        what = f"{skipped} of the last {steps} steps skipped, their gradients not finite"
        return f"warning: {what} ({skipped_total} skipped in this run)"
    if nonfinite > 0:
        what = f"{nonfinite} of the last {steps} steps had non-finite gradients, applied"
        return f"warning: {what} ({nonfinite_total} in this run)"
    return None


def lost_steps_error(counts: StepCounts, *, step: int) -> TrainError | None:
    """The error that stops a run most of whose recent steps were lost, else None."""
    if counts.recent_lost <= MOST_OF_RECENT:
        return None
    window = min(counts.steps, RECENT_STEPS)
    if counts.skips_nonfinite:
        outcome = "were skipped (the weights did not change)"
    else:
        outcome = "reached the weights, which are no longer usable"
    return TrainError(
        f"training stopped at step {step}: {counts.recent_lost} of the last {window} optimizer "
        f"steps had non-finite gradients (inf or NaN) and {outcome}; "
        f"{counts.skipped} skipped and {counts.nonfinite} non-finite in this run. "
        f"Likely causes: {LIKELY_CAUSES}"
    )
