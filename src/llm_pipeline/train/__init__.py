"""Fine-tuning on one machine or many: `run_finetune` is what the finetune step calls.

Exports resolve lazily: importing `llm_pipeline.train.cluster` or `.launch` (pure builders,
used when compiling pipelines) should not pull in torch, DeepSpeed and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm_pipeline import lazy_exports

if TYPE_CHECKING:
    from llm_pipeline.train.errors import TrainError
    from llm_pipeline.train.finetune import FinetuneResult, run_finetune

__getattr__ = lazy_exports(
    __name__,
    {
        "FinetuneResult": "llm_pipeline.train.finetune",
        "run_finetune": "llm_pipeline.train.finetune",
        "TrainError": "llm_pipeline.train.errors",
    },
)

__all__ = ["FinetuneResult", "TrainError", "run_finetune"]
