"""A classifier's memory formulas: hand counts for a tiny BERT, and what autograd keeps for
BERT's, DistilBERT's and a Llama's layers with a classification head."""

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from llm_pipeline.config import LoraSettings
from llm_pipeline.fit import estimates
from llm_pipeline.fit.memory import Lengths, runtime_bytes
from llm_pipeline.fit.shapes import shape_of
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.kinds import CLASSIFIER
from llm_pipeline.tasks.text_classification import fit_terms
from llm_pipeline.tasks.text_classification.fit_terms import (
    activation_bytes,
    encoder_layer_bytes,
    forward_memory,
    kept_bytes,
    layer_bytes,
)

from ...fit.kept import bytes_kept_for_backward
from ...fit.tiny_causal import config_of
from ...fit.tiny_classifiers import TINY_BERT, TINY_DISTILBERT, TINY_LLAMA_CLASSIFIER

LORA = LoraSettings(r=8, alpha=16, dropout=0.05, target_modules="all-linear")
LAYOUTS = {"bert": TINY_BERT, "distilbert": TINY_DISTILBERT, "llama": TINY_LLAMA_CLASSIFIER}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
BATCH = Lengths(batch=3, source=40, target=0)


def shape(layout: str, lora: bool = False, **changes):
    config = config_of(LAYOUTS[layout], **changes)
    return shape_of(
        config,
        name="tiny",
        kind=CLASSIFIER,
        terms=fit_terms,
        labels=3,
        lora=LORA if lora else None,
    )


def test_a_bert_layer_in_fp32_on_a_cpu_by_hand():
    h, ffn, heads, length = 64, 160, 4, 40
    # Per token: q, k, v (fp32); per head and key the attention probabilities, dropout's
    # mask and its output (fp32: SDPA's math path); two LayerNorms (input and mean, rstd);
    # two residual dropout masks (fp32 on CPU); GELU's input; the linear layers' inputs: the
    # layer's, the attention output, the first LayerNorm's output and GELU's output.
    per_token = (
        3 * 4 * h
        + heads * length * 12
        + 2 * (4 * h + 2 * 4)
        + 2 * 4 * h
        + 4 * ffn
        + 4 * (h + h + h + ffn)
    )
    assert per_token == 5_776
    assert encoder_layer_bytes(shape("bert"), BATCH, "fp32", "cpu") == 3 * 40 * per_token


def _kept_by_autograd(settings: dict, dtype: torch.dtype, lora: bool) -> int:
    """Bytes of every tensor autograd keeps for backward (weights excluded), by storage, for
    a padded batch of 3 x 40 tokens and 3 labels."""
    torch.manual_seed(0)
    config = config_of(settings, num_labels=3, attn_implementation="sdpa")
    model = AutoModelForSequenceClassification.from_config(config).to(dtype).train()
    if lora:
        from peft import LoraConfig, TaskType, get_peft_model

        from llm_pipeline.models.builders import head_modules

        adapters = LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.05,
            target_modules="all-linear",
            task_type=TaskType.SEQ_CLS,
            modules_to_save=head_modules(model),
        )
        model = get_peft_model(model, adapters, autocast_adapter_dtype=False)
    ids = torch.randint(3, config.vocab_size, (3, 40))
    mask = torch.ones_like(ids)
    mask[0, -10:] = 0  # padded, as batches of different lengths are
    ids[0, -10:] = 0  # with the pad id, which a decoder's head looks for
    labels = torch.tensor([0, 1, 2])
    return bytes_kept_for_backward(
        model, lambda: model(input_ids=ids, attention_mask=mask, labels=labels)
    )


@pytest.mark.parametrize(
    ("dtype", "lora"), [("fp32", False), ("bf16", False), ("bf16", True)], ids=str
)
@pytest.mark.parametrize("layout", ["bert", "distilbert", "llama"])
def test_each_layer_keeps_what_the_cpu_formula_counts(layout: str, dtype: str, lora: bool):
    # One layer more, all else the same: the difference is one layer's tensors.
    two = _kept_by_autograd(LAYOUTS[layout], DTYPES[dtype], lora)
    layers = "n_layers" if layout == "distilbert" else "num_hidden_layers"
    three = _kept_by_autograd({**LAYOUTS[layout], layers: 3}, DTYPES[dtype], lora)
    expected = three - two
    if layout == "bert" and lora:
        # "all-linear" adapts BERT's pooler too, which the per-layer average spreads over the
        # 2 layers' tokens: its dropout's mask and output (bf16 on CPU) of 64 and A's 8.
        expected += 3 * 40 * ((2 + 2) * 64 + 2 * 8) / 2
    assert layer_bytes(shape(layout, lora), BATCH, dtype, "cpu") == expected


@pytest.mark.parametrize("layout", ["bert", "distilbert", "llama"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_classifier_keeps_its_layers_and_the_head(layout: str, dtype: str):
    measured = _kept_by_autograd(LAYOUTS[layout], DTYPES[dtype], lora=False)
    estimate = kept_bytes(shape(layout), BATCH, dtype=dtype, device="cpu")
    assert estimate == pytest.approx(measured, rel=0.005)


def test_checkpointing_keeps_each_layer_input_and_recomputes_one_layer():
    tiny = shape("bert")
    layer = layer_bytes(tiny, BATCH, "fp16", "cuda")
    without = activation_bytes(tiny, BATCH, dtype="fp16", device="cuda", checkpointing=False)
    with_ = activation_bytes(tiny, BATCH, dtype="fp16", device="cuda", checkpointing=True)
    inputs = 2 * 2 * 3 * 40 * 64  # 2 layers' fp16 inputs
    assert without - with_ == (2 * layer + layer) - (inputs + 2 * layer)


def test_a_forward_pass_holds_the_weights_and_one_layer_by_hand():
    tiny = shape("bert")
    estimate = forward_memory(tiny, batch=8, tokens=40, dtype="fp32", device="cuda")
    assert [name for name, _ in estimate.parts] == ["weights", "working", "runtime"]
    assert estimate.part("weights") == 4 * tiny.parameters
    assert estimate.part("runtime") == runtime_bytes("cuda", "generate")
    # One layer at a time over 8 x 40 tokens in fp32: the residual stream, the layer's input
    # and output (3 x 64), q, k, v and the attention output (4 x 64), GELU's input and
    # output (2 x 160); the padding mask per pair of tokens, boolean and float (1 + 4 B).
    per_token = 3 * 64 + 4 * 64 + 2 * 160
    assert estimate.part("working") == 8 * 40 * per_token * 4 + 8 * 40 * 40 * 5


def test_a_decoders_forward_fills_its_key_value_cache():
    tiny = shape("llama")
    estimate = forward_memory(tiny, batch=8, tokens=40, dtype="bf16", device="cuda")
    # As the encoder's, with a gated feed-forward (3 x 160), plus keys and values of 2 layers
    # for every token (use_cache is on by default) and 3 logits per token (fp32).
    per_token = 3 * 64 + 4 * 64 + 3 * 160
    cache = 2 * 2 * 8 * 40 * 64 * 2
    working = 8 * 40 * per_token * 2 + 8 * 40 * 40 * 5 + cache + 8 * 40 * 3 * 4
    assert estimate.part("working") == working


def test_the_fit_layer_estimates_a_classifier_by_its_tasks_terms_alone():
    """The task hands these terms to the fit layer; the shape they read carries them, and
    the fit layer's estimates are theirs. Its own readers refuse a classifier."""
    assert get_task("text_classification").fit_terms() is fit_terms
    bert = shape("bert", lora=True)
    assert bert.terms is fit_terms
    for device in ("cpu", "cuda"):
        assert estimates.activation_bytes(
            bert, BATCH, dtype="bf16", device=device, checkpointing=False
        ) == activation_bytes(bert, BATCH, dtype="bf16", device=device, checkpointing=False)
        assert estimates.generation_memory(
            bert, batch=3, beams=4, source=40, new_tokens=9, dtype="fp32", device=device
        ) == forward_memory(bert, batch=3, tokens=40, dtype="fp32", device=device)
    with pytest.raises(ValueError, match=r"Task\.fit_terms"):
        shape_of(config_of(TINY_BERT), name="tiny", kind=CLASSIFIER)
