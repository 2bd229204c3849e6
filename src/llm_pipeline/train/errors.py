"""Errors of the finetune step that name their cause and what to change.

`TrainError` is a `UserError` too, so the step reports it as one message rather than a
traceback; it is also a RuntimeError because a failed rank or a hung collective is a runtime
failure of the job, not a bad argument.
"""

from __future__ import annotations

from llm_pipeline.errors import UserError

# Settings that lower memory per device, most effective first; named in out-of-memory errors.
OOM_ADVICE = (
    "lower train.per_device_batch_size (and raise train.gradient_accumulation_steps to keep "
    "the global batch), lower data.max_source_length / max_target_length, set "
    "train.gradient_checkpointing to true, or offload with train.offload_optimizer / "
    'train.offload_param ("cpu")'
)

_OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "out of memory")


class TrainError(UserError, RuntimeError):
    """Training could not run or did not finish; the message says why and what to change."""


def is_out_of_memory(text: str) -> bool:
    """Whether an error message (or a rank's stderr tail) reports device memory exhaustion."""
    return any(marker in text for marker in _OOM_MARKERS)


def out_of_memory_message(detail: str) -> str:
    """The message for a rank that ran out of device memory: what happened and what to lower."""
    return f"training ran out of GPU memory: {detail.strip()}\nTo fit: {OOM_ADVICE}."
