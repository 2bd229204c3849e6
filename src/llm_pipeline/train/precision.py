"""The precision a run trains in: the config's choice checked against this machine."""

from __future__ import annotations

import torch

from llm_pipeline.errors import TrainError
from llm_pipeline.models.generation import native_bf16
from llm_pipeline.train.deepspeed_config import resolve_precision
from llm_pipeline.train.spec import WorkerSpec


def training_precision(spec: WorkerSpec) -> str:
    """ "bf16", "fp16" or "fp32": `train.precision` ("auto" picks) on the devices present."""
    cuda = torch.cuda.is_available()
    try:
        return resolve_precision(
            spec.train.precision,
            cuda_available=cuda,
            bf16_supported=native_bf16(),
        )
    except ValueError as err:
        raise TrainError(f"train.{err}") from err
