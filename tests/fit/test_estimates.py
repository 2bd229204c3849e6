"""The fit check's memory formulas: a hand count for a T5-small shape, and what autograd keeps."""

from dataclasses import replace

import pytest
import torch
from transformers import AutoConfig, T5Config, T5ForConditionalGeneration

from llm_pipeline.fit.estimates import (
    Lengths,
    activation_bytes,
    cache_bytes,
    decoder_layer_bytes,
    encoder_layer_bytes,
    generation_memory,
    runtime_bytes,
)
from llm_pipeline.fit.known_models import KNOWN_MODELS
from llm_pipeline.fit.memory import DTYPE_BYTES, eager_score_bytes
from llm_pipeline.fit.shapes import shape_of

from .kept import bytes_kept_for_backward
from .t5_small import T5_SMALL


def test_the_cache_of_t5_small_counted_by_hand():
    # 3 documents x 4 beams = 12 sequences, 400 source tokens, 50 new ones, bf16 (2 bytes):
    # per decoder layer a key and a value of 512 (8 heads x 64) per token.
    cross, self_ = cache_bytes(T5_SMALL, sequences=12, source=400, new_tokens=50, dtype="bf16")
    assert cross == 2 * 6 * 12 * 400 * 512 * 2 == 58_982_400
    assert self_ == 2 * 6 * 12 * 50 * 512 * 2 == 7_372_800


def test_generation_memory_is_weights_cache_working_and_runtime():
    estimate = generation_memory(
        T5_SMALL, batch=3, beams=4, source=400, new_tokens=50, dtype="bf16", device="cuda"
    )
    assert [name for name, _ in estimate.parts] == ["weights", "cache", "working", "runtime"]
    assert estimate.part("weights") == 60_506_624 * 2
    assert estimate.part("cache") == 58_982_400 + 7_372_800
    assert estimate.part("runtime") == runtime_bytes("cuda", "generate")
    # The working memory: the larger of the encoder pass over 3 documents and one decoding
    # step of 12 beams; here the step: the encoder output per beam (12 x 400 x 512 x 2),
    # three fp32 copies of the logits (12 x 32128 x 4) and one layer's cache being reordered.
    step = 12 * 400 * 512 * 2 + 3 * 12 * 32128 * 4 + (58_982_400 + 7_372_800) / 6
    assert estimate.part("working") == step


def test_t5_small_encoder_layer_on_cpu_in_fp32_by_hand():
    lengths = Lengths(batch=2, source=10, target=5)
    # Per token: two RMS norms of 3 tensors (input 4 B, normalised fp32 4 B, scaled 4 B) x 512,
    # two dropout masks (fp32 on CPU) x 512, q, k, v and the attention output x 512 in fp32,
    # ReLU output + dropout mask + dropout output x 2048.
    per_token = 2 * 12 * 512 + 2 * 4 * 512 + 4 * 4 * 512 + (4 + 4 + 4) * 2048
    # Per score (8 heads x 10 x 10 per document): probabilities, dropout mask, output, fp32.
    scores = 2 * 8 * 10 * 10 * 12
    expected = 2 * 10 * per_token + scores
    assert encoder_layer_bytes(T5_SMALL, lengths, "fp32", "cpu") == expected == 1_002_240


def test_t5_small_decoder_layer_on_a_gpu_in_bf16_by_hand():
    lengths = Lengths(batch=2, source=10, target=5)
    # Per target token: three norms (2 + 4 + 2 B) and three 1-byte dropout masks x 512; self
    # q, k, v, out and cross q, out x 512 in bf16; ReLU out + mask + dropout out x 2048.
    per_target = 3 * 8 * 512 + 3 * 1 * 512 + 6 * 2 * 512 + (2 + 1 + 2) * 2048
    per_source = 2 * 2 * 512  # cross-attention keys and values
    # Per score (self 5 x 5, cross 5 x 10, 8 heads), what eager attention keeps on CUDA
    # with dropout: the fp32 softmax output, the 1-byte mask, the bf16 copy the product with
    # the values keeps (models/attention.py: a T5 trains with eager attention there).
    scores = 2 * 8 * (5 * 5 + 5 * 10) * (4 + 1 + 2)
    expected = 2 * (5 * per_target + 10 * per_source) + scores
    assert decoder_layer_bytes(T5_SMALL, lengths, "bf16", "cuda") == expected == 351_440
    # A model without a learned bias keeps SDPA's: the bias it is given, in bf16.
    sdpa = replace(T5_SMALL, learned_attention_bias=False)
    assert decoder_layer_bytes(sdpa, lengths, "bf16", "cuda") == expected - 2 * 8 * 75 * 5


@pytest.mark.parametrize(
    ("named", "device", "eager"),
    [
        (None, "cuda", True),  # T5's bias on CUDA: the worker switches it to eager
        (None, "cpu", False),
        ("sdpa", "cuda", False),  # named in model.architecture: the worker keeps it
        ("eager", "cpu", True),
    ],
)
def test_the_fit_check_counts_the_attention_the_worker_trains_with(named, device, eager):
    """One rule (`models.attention.trains_with_eager`) for the worker and the estimate: an
    `attn_implementation` named in model.architecture wins over the learned-bias switch."""
    from llm_pipeline.config import ModelConfig
    from llm_pipeline.fit.shapes import model_shape

    from ..offline_models import MINILM, TINY_T5

    architecture = {**TINY_T5, **({"attn_implementation": named} if named else {})}
    shape = model_shape(ModelConfig(architecture=architecture, tokenizer=MINILM))
    assert shape.learned_attention_bias and shape.named_attention == named
    lengths = Lengths(batch=2, source=10, target=5)
    bias = replace(shape, named_attention="eager")
    plain = replace(shape, learned_attention_bias=False, named_attention=None)
    expected = bias if eager else plain
    for layer_bytes in (encoder_layer_bytes, decoder_layer_bytes):
        assert layer_bytes(shape, lengths, "bf16", device) == layer_bytes(
            expected, lengths, "bf16", device
        )
    assert encoder_layer_bytes(bias, lengths, "bf16", device) > encoder_layer_bytes(
        plain, lengths, "bf16", device
    )


def test_checkpointing_keeps_each_layer_input_and_recomputes_one_layer():
    lengths = Lengths(batch=2, source=10, target=5)
    without = activation_bytes(T5_SMALL, lengths, dtype="fp32", device="cpu", checkpointing=False)
    with_ = activation_bytes(T5_SMALL, lengths, dtype="fp32", device="cpu", checkpointing=True)
    enc = encoder_layer_bytes(T5_SMALL, lengths, "fp32", "cpu")
    dec = decoder_layer_bytes(T5_SMALL, lengths, "fp32", "cpu")
    # Without: all 6 + 6 layers kept, room for one more; with: each layer's input (512 fp32
    # per token) and room for a recomputed layer and its gradients.
    inputs = 4 * (6 * 2 * 10 * 512 + 6 * 2 * 5 * 512)
    assert without - with_ == (6 * enc + 6 * dec + max(enc, dec)) - (inputs + 2 * max(enc, dec))


def _kept_by_autograd(config: T5Config, dtype: torch.dtype, lengths: Lengths) -> int:
    """Bytes of every tensor autograd keeps for backward (weights excluded), by storage."""
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(config).to(dtype).train()
    ids = torch.randint(0, config.vocab_size, (lengths.batch, lengths.source))
    labels = torch.randint(0, config.vocab_size, (lengths.batch, lengths.target))
    return bytes_kept_for_backward(model, lambda: model(input_ids=ids, labels=labels))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("ffn", ["relu", "gated-gelu"])
def test_the_cpu_formulas_count_what_autograd_keeps(dtype: str, ffn: str):
    config = T5Config(
        d_model=64,
        d_kv=24,
        num_heads=4,
        d_ff=160,
        num_layers=2,
        vocab_size=500,
        dropout_rate=0.1,
        feed_forward_proj=ffn,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    lengths = Lengths(batch=3, source=48, target=12)
    shape = shape_of(config, name="tiny")
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    measured = _kept_by_autograd(config, torch_dtype, lengths)
    # What stays until backward: the layers and what is around them (activation_bytes
    # without the room backward needs on top).
    everything = activation_bytes(shape, lengths, dtype=dtype, device="cpu", checkpointing=False)
    largest = max(
        encoder_layer_bytes(shape, lengths, dtype, "cpu"),
        decoder_layer_bytes(shape, lengths, dtype, "cpu"),
    )
    logits_grad = lengths.batch * lengths.target * config.vocab_size * (4 if dtype == "fp32" else 2)
    estimate = everything - largest - logits_grad
    assert estimate == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_eager_attention_keeps_what_the_cuda_formula_counts_per_score(dtype: str) -> None:
    """A T5 trains with eager attention on CUDA; without dropout what it keeps per score
    is the same on the CPU, where autograd's saved tensors are counted here (weights fp32,
    bf16 under autocast, as the Trainer runs mixed precision)."""
    config = T5Config(
        d_model=64,
        d_kv=16,
        num_heads=4,
        d_ff=128,
        num_layers=1,
        vocab_size=500,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
        attn_implementation="eager",
    )
    batch, heads, source = 2, 4, 96
    model = T5ForConditionalGeneration(config).train()
    kept: dict[tuple[int, torch.dtype], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        # The encoder's scores, 4-D or as the 3-D views its matmuls keep.
        if tensor.shape[-2:] == (source, source) and tensor.numel() == batch * heads * source**2:
            kept[(tensor.untyped_storage().data_ptr(), tensor.dtype)] = tensor.nbytes
        return tensor

    ids = torch.randint(2, 500, (batch, source))
    labels = torch.randint(2, 500, (batch, 8))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), autocast:
        model(input_ids=ids, labels=labels)
    per_score = sum(kept.values()) / (batch * heads * source**2)
    assert per_score == eager_score_bytes(DTYPE_BYTES[dtype], dropout=False)
    assert per_score == {"fp32": 4, "bf16": 6}[dtype]


def test_the_hand_written_shape_is_what_the_check_reads_from_t5_smalls_config():
    settings = dict(KNOWN_MODELS["google-t5/t5-small"])
    config = AutoConfig.for_model(settings.pop("model_type"), **settings)
    assert replace(shape_of(config, name="t5-small"), source_note=None) == T5_SMALL
