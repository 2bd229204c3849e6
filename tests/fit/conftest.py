"""Every fit test runs offline: hub ids resolve through the HF cache or the shipped table."""

from collections.abc import Iterator

import pytest

from llm_pipeline.fit.shapes import hub_reachable


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """HF_HUB_OFFLINE for this process and the CLI processes it starts."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_reachable.cache_clear()
    yield
    hub_reachable.cache_clear()
