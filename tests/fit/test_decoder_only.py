"""A causal LM's memory formulas: hand counts for a small Llama shape, and what autograd keeps
for Llama's and OPT's layers, every weight training or LoRA's adapters only."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from llm_pipeline.config import LoraSettings
from llm_pipeline.fit.decoder_only import (
    activation_bytes,
    cache_bytes,
    kept_bytes,
    layer_bytes,
    logits_working_bytes,
)
from llm_pipeline.fit.estimates import generation_memory
from llm_pipeline.fit.memory import Lengths
from llm_pipeline.fit.shapes import shape_of
from llm_pipeline.tasks.kinds import CAUSAL_LM

from .kept import bytes_kept_for_backward
from .tiny_causal import TINY_LLAMA, TINY_OPT, config_of

LORA = LoraSettings(r=8, alpha=16, dropout=0.05, target_modules="all-linear")


def test_a_llama_layer_in_bf16_on_a_gpu_by_hand():
    shape = shape_of(config_of(TINY_LLAMA), name="tiny", kind=CAUSAL_LM)
    lengths = Lengths(batch=3, source=40, target=0)
    h, ffn, heads = 64, 160, 4
    # Per token: two RMS norms (fp32 input 4 B + rsqrt 4 B, and the bf16 normalised value
    # the weight's gradient needs); q, k, v and the output (bf16); the log-sum-exp per head
    # (fp32); the padding mask over 40 keys (bf16); gate, SiLU and up outputs; the linear
    # layers' inputs: both norms' outputs and the gated product.
    norms = 2 * (4 * h + 4) + 2 * 2 * h
    attention = 4 * 2 * h + 4 * heads + 40 * 2
    inputs = 2 * 2 * h + 2 * ffn
    per_token = norms + attention + 3 * 2 * ffn + inputs
    assert layer_bytes(shape, lengths, "bf16", "cuda") == 3 * 40 * per_token == 350_400


def test_lora_keeps_adapter_dropout_instead_of_the_frozen_layers_inputs():
    shape = shape_of(config_of(TINY_LLAMA), name="tiny", kind=CAUSAL_LM, lora=LORA)
    lengths = Lengths(batch=3, source=40, target=0)
    h, ffn, heads = 64, 160, 4
    # q, k, v, o, gate, up read 64 wide, down 160: each adapter keeps its dropout's mask
    # (1 B on a GPU) and output (2 B) of its input, and A's 8-wide output; the frozen
    # norms' normalised values and the frozen linears' inputs are not kept.
    adapters = (1 + 2) * (6 * h + ffn) + 7 * 2 * 8
    per_token = 2 * (4 * h + 4) + 4 * 2 * h + 4 * heads + 40 * 2 + 3 * 2 * ffn + adapters
    assert layer_bytes(shape, lengths, "bf16", "cuda") == 3 * 40 * per_token


def test_checkpointing_keeps_each_layer_input_and_recomputes_one_layer():
    shape = shape_of(config_of(TINY_LLAMA), name="tiny", kind=CAUSAL_LM)
    lengths = Lengths(batch=3, source=40, target=0)
    layer = layer_bytes(shape, lengths, "bf16", "cuda")
    without = activation_bytes(shape, lengths, dtype="bf16", device="cuda", checkpointing=False)
    with_ = activation_bytes(shape, lengths, dtype="bf16", device="cuda", checkpointing=True)
    inputs = 2 * 2 * 3 * 40 * 64  # 2 layers' bf16 inputs
    assert without - with_ == (2 * layer + layer) - (inputs + 2 * layer)
    # Around the loss: the bf16 logits, their shifted copy and its fp32 upcast.
    assert logits_working_bytes(shape, lengths, "bf16") == 3 * 40 * 500 * (2 + 2 + 4)


def test_the_cache_holds_keys_and_values_of_prompt_and_new_tokens_of_every_beam():
    # Grouped-query attention: 2 key/value heads of 16 for 4 query heads.
    shape = shape_of(config_of(TINY_LLAMA, num_key_value_heads=2), name="tiny", kind=CAUSAL_LM)
    assert cache_bytes(shape, sequences=3 * 4, tokens=100 + 20, dtype="bf16") == (
        2 * 2 * 12 * 120 * 32 * 2
    )
    estimate = generation_memory(
        shape, batch=3, beams=4, source=100, new_tokens=20, dtype="bf16", device="cuda"
    )
    assert estimate.part("cache") == 2 * 2 * 12 * 120 * 32 * 2
    assert estimate.part("weights") == shape.parameters * 2


def _kept_by_autograd(settings: dict, dtype: torch.dtype, lora: bool) -> int:
    """Bytes of every tensor autograd keeps for backward (weights excluded), by storage, for a
    padded batch of 3 x 40 tokens."""
    torch.manual_seed(0)
    config = config_of(settings, attn_implementation="sdpa")
    model = AutoModelForCausalLM.from_config(config).to(dtype).train()
    if lora:
        from peft import LoraConfig, get_peft_model

        adapters = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear")
        model = get_peft_model(model, adapters, autocast_adapter_dtype=False)
    ids = torch.randint(3, config.vocab_size, (3, 40))
    mask = torch.ones_like(ids)
    mask[0, -10:] = 0  # padded, as batches of different lengths are
    return bytes_kept_for_backward(
        model, lambda: model(input_ids=ids, attention_mask=mask, labels=ids)
    )


LAYOUTS = {"llama": TINY_LLAMA, "opt": TINY_OPT}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.mark.parametrize(
    ("dtype", "lora"), [("fp32", False), ("bf16", False), ("bf16", True)], ids=str
)
@pytest.mark.parametrize("layout", ["llama", "opt"])
def test_each_layer_keeps_what_the_cpu_formula_counts(layout: str, dtype: str, lora: bool):
    # One layer more, all else the same: the difference is one layer's tensors.
    two = _kept_by_autograd(LAYOUTS[layout], DTYPES[dtype], lora)
    three = _kept_by_autograd({**LAYOUTS[layout], "num_hidden_layers": 3}, DTYPES[dtype], lora)
    config = config_of(LAYOUTS[layout])
    shape = shape_of(config, name="tiny", kind=CAUSAL_LM, lora=LORA if lora else None)
    assert layer_bytes(shape, Lengths(3, 40, 0), dtype, "cpu") == three - two


@pytest.mark.parametrize(("layout", "dtype"), [("llama", "bf16"), ("opt", "fp32")])
def test_the_model_keeps_its_layers_and_the_loss(layout: str, dtype: str):
    measured = _kept_by_autograd(LAYOUTS[layout], DTYPES[dtype], lora=False)
    shape = shape_of(config_of(LAYOUTS[layout]), name="tiny", kind=CAUSAL_LM)
    estimate = kept_bytes(shape, Lengths(3, 40, 0), dtype=dtype, device="cpu")
    # Left out: token ids, labels and rotary tables, under 0.5% here, less at real sizes.
    assert estimate == pytest.approx(measured, rel=0.005)
