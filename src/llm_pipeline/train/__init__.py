"""Fine-tuning on one machine or many: `run_finetune` is what the finetune step calls.

Exports resolve lazily: importing a light module of this package (`train.spec`,
`train.deepspeed_config`, used when compiling pipelines and checking fit) should not pull in
torch, DeepSpeed and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm_pipeline import lazy_exports

if TYPE_CHECKING:
    from llm_pipeline.errors import TrainError
    from llm_pipeline.train.job import FinetuneResult, run_finetune

__getattr__ = lazy_exports(
    __name__,
    {
        "FinetuneResult": "llm_pipeline.train.job",
        "run_finetune": "llm_pipeline.train.job",
        "TrainError": "llm_pipeline.errors",
    },
)

__all__ = ["FinetuneResult", "TrainError", "run_finetune"]
