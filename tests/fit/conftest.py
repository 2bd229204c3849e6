"""Every fit test runs offline: hub ids resolve through the HF cache or the shipped table."""

from collections.abc import Iterator

import pytest

from llm_pipeline.fit.shapes import hub_reachable

from .fake_gpus import use_gpus


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """HF_HUB_OFFLINE for this process and the CLI processes it starts."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_reachable.cache_clear()
    yield
    hub_reachable.cache_clear()


@pytest.fixture(autouse=True)
def cpu_only_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine has no GPU in every fit test, whatever it really has: a local verdict
    must not depend on where the suite runs. A test that needs GPUs says which (`use_gpus`);
    test_local_gpus.py reads the real ones."""
    use_gpus(monkeypatch)
