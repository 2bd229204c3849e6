"""Peak memory of one process that trains, or generates with, a model: seq2seq formulas.

Each estimate is a sum of named parts (weights, model states, activations, cache, runtime),
so a refusal can say what takes the memory. The formulas here count what PyTorch keeps
alive, tensor by tensor, for a T5-style block (RMS norm, attention, feed-forward, dropout),
as transformers 5 and torch 2.13 run it; a causal LM's (a decoder-only stack) are in
`decoder_only.py`, and `activation_bytes` and `generation_memory` pick by the shape's kind
(`encoder_decoder`). A shape read by its task's own terms (`shapes.FitTerms`: a classifier's,
forward only outside training) is estimated by them.
`benchmarks/fit.py` compares them with peaks measured on CPU; `memory.py` says what differs
between a CPU and a CUDA process.
"""

from __future__ import annotations

from llm_pipeline.fit import decoder_only
from llm_pipeline.fit.memory import (
    DEVICES,
    DTYPE_BYTES,
    Breakdown,
    DeviceKind,
    Lengths,
    eager_score_bytes,
    kernel_bytes,
    runtime_bytes,
)
from llm_pipeline.fit.shapes import ModelShape, Stack
from llm_pipeline.models.attention import trains_with_eager


def norm_bytes(dtype_bytes: int) -> float:
    """T5's RMS norm keeps its input, the fp32 normalised value and the scaled output."""
    return 2 * dtype_bytes + 4


def ffn_bytes(stack: Stack, dtype_bytes: int, mask: float) -> float:
    """Bytes per token of one feed-forward block's kept activations.

    ReLU keeps its output (the down projection's input); T5 v1.1's gated GELU keeps six
    tensors (both projections and the tanh-GELU's steps) plus the product. Dropout adds its
    mask and replaces the down projection's input by its own output.
    """
    s = dtype_bytes
    kept = float((7 if stack.gated else 1) * s)
    if stack.dropout:
        kept += mask + (0 if stack.gated else s)
    return stack.ffn * kept


def score_bytes(shape: ModelShape, dropout: bool, dtype: str, device: DeviceKind) -> float:
    """Bytes one attention score keeps for backward: eager attention's where the model trains
    with it (`models.attention.trains_with_eager`: a learned attention bias on CUDA, or eager
    named in `model.architecture`), else the device's SDPA kernel's."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    eager = trains_with_eager(
        cuda=device == "cuda",
        learned_bias=shape.learned_attention_bias,
        named=shape.named_attention,
    )
    if eager:
        return eager_score_bytes(s, dropout)
    return kernel_bytes(k.scores_dropout if dropout else k.scores, s)


def encoder_layer_bytes(
    shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind
) -> float:
    """What one encoder layer keeps for backward, for the whole micro-batch."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    e = shape.encoder
    mask = kernel_bytes(k.mask, s)
    per_token = (
        2 * norm_bytes(s) * e.hidden
        + (2 * mask * e.hidden if e.dropout else 0)
        + 4 * kernel_bytes(k.attention, s) * e.inner
        + ffn_bytes(e, s, mask)
    )
    scores = score_bytes(shape, e.dropout, dtype, device)
    tokens = lengths.sequences * lengths.source
    return tokens * per_token + lengths.sequences * e.heads * lengths.source**2 * scores


def decoder_layer_bytes(
    shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind
) -> float:
    """What one decoder layer (self- and cross-attention) keeps for backward."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    d = shape.decoder
    mask = kernel_bytes(k.mask, s)
    attention = kernel_bytes(k.attention, s)
    per_target = (
        3 * norm_bytes(s) * d.hidden
        + (3 * mask * d.hidden if d.dropout else 0)
        + (4 + 2) * attention * d.inner  # self q, k, v, out; cross q, out
        + ffn_bytes(d, s, mask)
    )
    per_source = 2 * attention * d.inner  # cross-attention keys and values
    scores = score_bytes(shape, d.dropout, dtype, device)
    b, src, tgt = lengths.sequences, lengths.source, lengths.target
    return b * (tgt * per_target + src * per_source) + b * d.heads * (tgt**2 + tgt * src) * scores


def _edges(shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind) -> float:
    """Outside the layers: embedding dropout, final norm and dropout, the encoder output
    and the LM head's input per token, and the log-softmax over the vocabulary."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    mask = kernel_bytes(k.mask, s)
    total = 0.0
    for stack, tokens in (
        (shape.encoder, lengths.sequences * lengths.source),
        (shape.decoder, lengths.sequences * lengths.target),
    ):
        per_token = norm_bytes(s) + s + (2 * mask if stack.dropout else 0)
        total += tokens * per_token * stack.hidden
    return total + lengths.sequences * lengths.target * shape.vocab * s


def activation_bytes(
    shape: ModelShape,
    lengths: Lengths,
    *,
    dtype: str,
    device: DeviceKind,
    checkpointing: bool,
) -> float:
    """Peak activation memory of one micro-batch's forward and backward.

    Without checkpointing every layer keeps its tensors until backward reaches it; with it
    (transformers checkpoints each block) a layer keeps only its input, and backward
    recomputes one block at a time. Either way backward needs room for one layer's worth of
    gradients beside what is kept, and for the gradient of the logits. Under LoRA the
    adapters' own (`adapter_bytes`) come on top; a causal LM's are `decoder_only`'s.
    """
    if shape.terms is not None:
        return shape.terms.activation_bytes(
            shape, lengths, dtype=dtype, device=device, checkpointing=checkpointing
        )
    if not shape.kind.encoder_decoder:
        return decoder_only.activation_bytes(
            shape, lengths, dtype=dtype, device=device, checkpointing=checkpointing
        )
    s = DTYPE_BYTES[dtype]
    enc = encoder_layer_bytes(shape, lengths, dtype, device)
    dec = decoder_layer_bytes(shape, lengths, dtype, device)
    largest = max(enc, dec)
    if checkpointing:
        kept = float(s) * (
            shape.encoder.layers * lengths.sequences * lengths.source * shape.encoder.hidden
            + shape.decoder.layers * lengths.sequences * lengths.target * shape.decoder.hidden
        )
        working = 2 * largest  # the recomputed block and its gradients
    else:
        kept = shape.encoder.layers * enc + shape.decoder.layers * dec
        working = largest
    logits_grad = lengths.sequences * lengths.target * shape.vocab * s
    if shape.adapters is not None and not checkpointing:
        kept += adapter_bytes(shape, lengths, dtype, device)
    return kept + _edges(shape, lengths, dtype, device) + working + logits_grad


def adapter_bytes(shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind) -> float:
    """What a seq2seq model's LoRA adapters keep besides the layers' own tensors: each
    adapted linear's dropout mask and output (its input without dropout) and the rank-wide
    output of its A. The layers are counted as when every weight trains, so the inputs of
    the frozen linears, which nothing keeps then, make this an overestimate."""
    adapters = shape.adapters
    if adapters is None:
        return 0.0
    s, mask = DTYPE_BYTES[dtype], kernel_bytes(DEVICES[device].mask, DTYPE_BYTES[dtype])
    per_input = (mask + s) if adapters.dropout else 0.0
    total = 0.0
    for stack, tokens in (
        ("encoder", lengths.sequences * lengths.source),
        ("decoder", lengths.sequences * lengths.target),
    ):
        inputs = sum(n for name, n in adapters.inputs if name == stack)
        linears = sum(n for name, n in adapters.linears if name == stack)
        total += tokens * (per_input * inputs + s * adapters.rank * linears)
    return total


def cache_bytes(
    shape: ModelShape, *, sequences: int, source: int, new_tokens: int, dtype: str
) -> tuple[float, float]:
    """(cross-attention, self-attention) cache of `sequences` beams: keys and values per
    decoder layer, for every source token and every generated token."""
    s = DTYPE_BYTES[dtype]
    d = shape.decoder
    cross = 2 * d.layers * sequences * source * d.inner * s
    self_ = 2 * d.layers * sequences * new_tokens * d.inner * s
    return float(cross), float(self_)


def generation_working_bytes(
    shape: ModelShape,
    *,
    batch: int,
    beams: int,
    source: int,
    new_tokens: int,
    dtype: str,
    device: DeviceKind,
) -> float:
    """Besides weights and cache: the larger of the encoder pass and a decoding step.

    The encoder runs once on `batch` documents (one layer's tensors at a time, the
    per-layer attention bias among them); then every step holds the encoder output copied
    per beam, the logits over the vocabulary in fp32 (logits, log-softmax, beam scores),
    and, under beam search, a copy of one layer's cache while it is reordered.
    """
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    e, d = shape.encoder, shape.decoder
    sequences = batch * beams
    tokens = batch * source
    layer_hidden = tokens * (2 * e.hidden + 3 * e.inner + (3 if e.gated else 1) * e.ffn) * s
    scores = batch * e.heads * source**2 * (s + kernel_bytes(k.scores_inference, s))
    encoder_pass = layer_hidden + scores + tokens * e.hidden * s
    cross, self_ = cache_bytes(
        shape, sequences=sequences, source=source, new_tokens=new_tokens, dtype=dtype
    )
    reorder = (cross + self_) / d.layers if beams > 1 else 0.0
    step = sequences * source * e.hidden * s + 3 * sequences * shape.vocab * 4 + reorder
    return max(encoder_pass, step)


def scoring_memory(
    shape: ModelShape, *, sequences: int, tokens: int, dtype: str, device: DeviceKind
) -> Breakdown:
    """Peak memory of a causal LM's evaluation pass that scores `sequences` whole sequences
    of `tokens` at once, keeping every position's logits (`Task.fit_scored_sequences_per_row`:
    DPO's chosen and rejected answers)."""
    return Breakdown(
        (
            ("weights", float(shape.parameters * DTYPE_BYTES[dtype])),
            (
                "scoring pass",
                decoder_only.scoring_pass_bytes(
                    shape, sequences=sequences, tokens=tokens, dtype=dtype
                ),
            ),
            ("runtime", runtime_bytes(device, "generate")),
        )
    )


def generation_memory(
    shape: ModelShape,
    *,
    batch: int,
    beams: int,
    source: int,
    new_tokens: int,
    dtype: str,
    device: DeviceKind,
    weight_bytes: float | None = None,
) -> Breakdown:
    """Peak memory of one generating process (on its GPU, or its RSS on CPU).

    `source`: a seq2seq model's document tokens, a causal LM's prompt tokens (the cache
    then holds prompt and new tokens of every beam). A shape with its task's own terms (a
    classifier's) generates nothing: their one forward pass over `batch` inputs of `source`
    tokens (`beams` and `new_tokens` unused). `weight_bytes`: bytes per parameter where the
    weights are not held in `dtype` (an engine's int8 form: 1)."""
    if shape.terms is not None:
        return shape.terms.forward_memory(
            shape, batch=batch, tokens=source, dtype=dtype, device=device
        )
    if not shape.kind.encoder_decoder:
        cache = decoder_only.cache_bytes(
            shape, sequences=batch * beams, tokens=source + new_tokens, dtype=dtype
        )
        working = decoder_only.generation_working_bytes(
            shape, batch=batch, beams=beams, prompt=source, new_tokens=new_tokens, dtype=dtype
        )
    else:
        cross, self_ = cache_bytes(
            shape, sequences=batch * beams, source=source, new_tokens=new_tokens, dtype=dtype
        )
        cache = cross + self_
        working = generation_working_bytes(
            shape,
            batch=batch,
            beams=beams,
            source=source,
            new_tokens=new_tokens,
            dtype=dtype,
            device=device,
        )
    return Breakdown(
        (
            ("weights", float(shape.parameters * (weight_bytes or DTYPE_BYTES[dtype]))),
            ("cache", cache),
            ("working", working),
            ("runtime", runtime_bytes(device, "generate")),
        )
    )
