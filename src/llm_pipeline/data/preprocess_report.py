"""The parts of a preprocess report that tasks share: token length statistics, what
packing did, and the step's logger. Each task's report (`tasks/<task>/preprocess_report.py`)
is built from them."""

import logging
from dataclasses import dataclass

import numpy as np

#: The preprocess step's log: every task's preprocessing logs here, under one name.
logger = logging.getLogger("llm_pipeline.data.preprocess")


@dataclass(frozen=True)
class LengthStats:
    """Token lengths before truncation, special tokens included."""

    p50: float
    p95: float
    p99: float
    max: int

    @classmethod
    def of(cls, lengths: np.ndarray) -> "LengthStats":
        p50, p95, p99 = np.percentile(lengths, [50, 95, 99])
        return cls(p50=float(p50), p95=float(p95), p99=float(p99), max=int(lengths.max()))


@dataclass(frozen=True)
class PackingStats:
    """What `data.packing` did to the train split."""

    packed: bool
    #: Why the split stayed unpacked (the model's attention would cross examples).
    reason: str | None = None
    examples: int = 0
    rows: int = 0
    #: Share of the packed rows' tokens that are examples' tokens, not padding.
    fill: float = 0.0
