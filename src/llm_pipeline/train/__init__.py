"""Fine-tuning on one machine or many: `run_finetune` is what the finetune step calls.

Exports resolve lazily: importing `llm_pipeline.launch.cluster` or `.launch` (pure builders,
used when compiling pipelines) should not pull in torch, DeepSpeed and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_pipeline.errors import TrainError
    from llm_pipeline.train.job import FinetuneResult, run_finetune

_EXPORTS = {
    "FinetuneResult": "llm_pipeline.train.job",
    "run_finetune": "llm_pipeline.train.job",
    "TrainError": "llm_pipeline.errors",
}

__all__ = ["FinetuneResult", "TrainError", "run_finetune"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'llm_pipeline.train' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
