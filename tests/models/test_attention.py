"""The attention a model trains with on a GPU (models/attention.py), as the finetune step's
worker builds the model: T5's learned position bias trains under eager attention on CUDA,
where sdpa's backward gave non-finite bf16 gradients; nothing else changes."""

from __future__ import annotations

from typing import Any

import torch

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.models.attention import has_learned_attention_bias
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.tasks import get_task
from llm_pipeline.train.worker import _build_model

from ..offline_models import MINILM, TINY_LLAMA, TINY_T5
from ..train.specs import unrun_spec


def _built(task: str, architecture: dict[str, Any], *, cuda: bool) -> torch.nn.Module:
    spec = unrun_spec(ModelConfig(architecture=architecture, tokenizer=MINILM), TrainConfig(), task)
    kind = get_task(task)
    tokenizer = load_tokenizer(spec.model, kind=kind.model_kind)
    return _build_model(spec, kind, tokenizer, None, cuda=cuda)


def _attention(model: torch.nn.Module) -> str:
    return str(model.config._attn_implementation)  # type: ignore[union-attr]


def test_a_t5_trains_with_eager_attention_on_a_gpu_and_sdpa_elsewhere() -> None:
    on_gpu = _built("summarization", dict(TINY_T5), cuda=True)
    assert has_learned_attention_bias(on_gpu)
    assert _attention(on_gpu) == "eager"
    # Every attention layer reads the switch, not only the top config.
    layer = on_gpu.encoder.block[0].layer[0].SelfAttention  # type: ignore[union-attr,index]
    assert layer.config._attn_implementation == "eager"
    assert _attention(_built("summarization", dict(TINY_T5), cuda=False)) == "sdpa"


def test_an_explicit_attention_in_the_architecture_is_kept() -> None:
    explicit = {**TINY_T5, "attn_implementation": "sdpa"}
    assert _attention(_built("summarization", explicit, cuda=True)) == "sdpa"


def test_a_model_without_a_learned_attention_bias_keeps_sdpa_on_a_gpu() -> None:
    llama = _built("instruction_tuning", dict(TINY_LLAMA), cuda=True)
    assert not has_learned_attention_bias(llama)
    assert _attention(llama) == "sdpa"


def test_eager_and_sdpa_compute_the_same_t5_loss_and_gradients() -> None:
    """The switch changes the kernels, not the model: same loss and bias gradient (fp32, CPU)."""
    model = _built("summarization", dict(TINY_T5), cuda=False)
    generator = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(5, 1000, (2, 12), generator=generator),
        "attention_mask": torch.ones(2, 12, dtype=torch.long),
        "labels": torch.randint(5, 1000, (2, 6), generator=generator),
    }
    batch["attention_mask"][1, 8:] = 0  # a padded row: the mask and the bias add up

    def loss_and_bias_grad(attention: str) -> tuple[torch.Tensor, torch.Tensor]:
        model.set_attn_implementation(attention)  # type: ignore[operator]
        model.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        bias = model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias  # type: ignore[union-attr,index]
        return loss.detach(), bias.weight.grad.clone()

    sdpa_loss, sdpa_grad = loss_and_bias_grad("sdpa")
    eager_loss, eager_grad = loss_and_bias_grad("eager")
    assert torch.allclose(sdpa_loss, eager_loss, rtol=1e-5)
    assert torch.allclose(sdpa_grad, eager_grad, rtol=1e-4, atol=1e-7)
