"""Recognising a rank that ran out of device memory, and the advice that goes with it.

Training (a rank's own exception, or its stderr tail read by the launcher) and evaluation
(its sharded generation) word the failure the same way.
"""

from __future__ import annotations

# Settings that lower memory per device, most effective first; named in out-of-memory errors.
OOM_ADVICE = (
    "lower train.per_device_batch_size (and raise train.gradient_accumulation_steps to keep "
    "the global batch), lower data.max_source_length / max_target_length, set "
    "train.gradient_checkpointing to true, or offload with train.offload_optimizer / "
    'train.offload_param ("cpu")'
)

_OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "out of memory")


def is_out_of_memory(text: str) -> bool:
    """Whether an error message (or a rank's stderr tail) reports device memory exhaustion."""
    return any(marker in text for marker in _OOM_MARKERS)


def out_of_memory_message(detail: str) -> str:
    """The message for a rank that ran out of device memory: what happened and what to lower."""
    return f"training ran out of GPU memory: {detail.strip()}\nTo fit: {OOM_ADVICE}."
