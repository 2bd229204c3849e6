"""bf16 is chosen only on GPUs that compute in it natively (compute capability 8.0 and up).

torch 2.13's `torch.cuda.is_bf16_supported()` counts emulation and says True on a T4 or a V100;
training (`train.precision: auto`), evaluation and serving must still pick fp32 there. No GPU
runs here, so the CUDA queries answer as the named GPU would: capability from its properties,
and `is_bf16_supported` True everywhere, as torch answers on all of them.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.models.generation import inference_dtype, native_bf16
from llm_pipeline.train.spec import WorkerSpec
from llm_pipeline.train.trainer_settings import training_precision

from ..train.specs import unrun_spec

GPUS = {"T4": (7, 5), "V100": (7, 0), "P100": (6, 0), "A100": (8, 0), "L4": (8, 9), "H100": (9, 0)}
NATIVE = {"A100", "L4", "H100"}


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch):
    """Make torch answer as if the named GPU were device 0."""

    def install(name: str) -> None:
        major, minor = GPUS[name]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
        monkeypatch.setattr(
            torch.cuda,
            "get_device_properties",
            lambda index=None: SimpleNamespace(major=major, minor=minor, name=name),
        )
        monkeypatch.setattr(torch.version, "hip", None)

    return install


def _spec(precision: str) -> WorkerSpec:
    return unrun_spec(ModelConfig(source="google-t5/t5-small"), TrainConfig(precision=precision))


@pytest.mark.parametrize("name", sorted(GPUS))
def test_bf16_only_where_native(gpu, name: str) -> None:
    gpu(name)
    cuda = torch.device("cuda", 0)
    native = name in NATIVE
    assert native_bf16(cuda) is native
    assert inference_dtype(cuda) == (torch.bfloat16 if native else torch.float32)
    assert training_precision(_spec("auto")) == ("bf16" if native else "fp32")


@pytest.mark.parametrize("name", ["T4", "V100"])
def test_asking_for_bf16_on_a_gpu_that_emulates_it_is_refused(gpu, name: str) -> None:
    gpu(name)
    with pytest.raises(TrainError, match=r"train\.precision: this GPU has no bf16"):
        training_precision(_spec("bf16"))


def test_cpu_is_fp32() -> None:
    assert not native_bf16(torch.device("cpu"))
    assert inference_dtype(torch.device("cpu")) == torch.float32
