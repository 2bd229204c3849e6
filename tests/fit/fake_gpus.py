"""GPUs as torch describes them, for fit tests of machines this one is not.

`machines.visible_gpus` is the one place the fit check reads the local GPUs; tests replace it
(tests/fit/conftest.py makes every fit test's machine a CPU-only one unless it says
otherwise). The figures are what `torch.cuda.get_device_properties` reports on such a card.
"""

import pytest

from llm_pipeline.fit import machines
from llm_pipeline.fit.machines import GpuProperties

H100 = GpuProperties("NVIDIA H100 80GB HBM3", 85_045_395_456, 9, 0)  # 79.2 GiB, bf16
T4 = GpuProperties("Tesla T4", 15_828_320_256, 7, 5)  # 14.7 GiB, no bf16


def use_gpus(monkeypatch: pytest.MonkeyPatch, *gpus: GpuProperties) -> None:
    """Make this machine's torch see `gpus` (none: a CPU-only machine)."""
    monkeypatch.setattr(machines, "visible_gpus", lambda: tuple(gpus))
