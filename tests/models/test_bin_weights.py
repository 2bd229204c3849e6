"""Checkpoints that ship only `pytorch_model.bin` (google/t5-v1_1-xxl does) load, through torch's
`weights_only` unpickler; a `.bin` that would run code when unpickled is refused, unrun."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from transformers import T5Config, T5ForConditionalGeneration

from llm_pipeline.config import ModelConfig
from llm_pipeline.errors import ModelError
from llm_pipeline.models.loading import load_model

TINY = T5Config(vocab_size=64, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8)


def _bin_checkpoint(folder: Path, state: object) -> Path:
    """A checkpoint folder as the hub serves .bin-only models: config.json + pytorch_model.bin."""
    folder.mkdir()
    TINY.save_pretrained(folder)
    torch.save(state, folder / "pytorch_model.bin")
    return folder


def test_a_bin_only_checkpoint_loads_its_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    original = T5ForConditionalGeneration(TINY)
    folder = _bin_checkpoint(tmp_path / "t5", original.state_dict())
    assert not list(folder.glob("*.safetensors"))

    loaded = load_model(ModelConfig(source=str(folder)), tokenizer=None)  # type: ignore[arg-type]

    expected = original.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


class _RunsCode:
    """Unpickling this calls a function: what a malicious pytorch_model.bin does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_bin_that_would_run_code_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    state = {"shared.weight": torch.zeros(64, 16), "payload": _RunsCode(marker)}
    folder = _bin_checkpoint(tmp_path / "t5", state)

    with pytest.raises(ModelError) as refused:
        load_model(ModelConfig(source=str(folder)), tokenizer=None)  # type: ignore[arg-type]

    message = str(refused.value)
    assert message.startswith(f"model.source {str(folder)!r}: could not load")
    assert "holds more than tensors" in message
    assert not marker.exists()
