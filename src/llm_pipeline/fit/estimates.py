"""Peak memory of one process that trains, or generates with, a seq2seq model.

Each estimate is a sum of named parts (weights, model states, activations, cache, runtime),
so a refusal can say what takes the memory. The formulas count what PyTorch keeps alive,
tensor by tensor, for a T5-style block (RMS norm, attention, feed-forward, dropout), as
transformers 5 and torch 2.13 run it; `benchmarks/memory.py --fit` compares them with peaks
measured on CPU. Two things differ between a CPU and a CUDA process, and the `Device`
constants below say how:

* dropout: on CPU torch keeps a mask in the activation dtype; CUDA keeps a 1-byte mask;
* attention: on CPU, T5's attention (a float bias, dropout) runs SDPA's math path, which
  keeps q, k, v and the probabilities in fp32 plus dropout's mask and output for every score;
  on CUDA the memory-efficient SDPA kernel keeps q, k, v, the output and only the bias it
  is given (T5's position bias plus the padding mask, one per layer) per score.

The CUDA side cannot be measured on this machine; its constants follow from the kernels'
documented saved tensors and stay unverified until a GPU run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llm_pipeline.fit.shapes import ModelShape, Stack

GIB = 2**30
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
DeviceKind = Literal["cpu", "cuda"]

#: A CPU process's own memory before any model: the interpreter, torch, transformers,
#: DeepSpeed, datasets, tokenizers and their first-use buffers. Measured on this project's
#: stack by `benchmarks/memory.py --fit` (its "runtime" column, RSS before the model).
CPU_RUNTIME_GIB = {"train": 0.5, "generate": 0.4}
#: A CUDA process's GPU memory besides tensors: CUDA context, cuBLAS workspaces, NCCL and
#: allocator rounding (unverified here: no GPU).
CUDA_RUNTIME_GIB = 1.0
#: A CUDA process's host memory before any model: as on CPU plus the CUDA libraries it maps
#: (unverified here: no GPU).
CUDA_HOST_RUNTIME_GIB = 3.0


@dataclass(frozen=True)
class Breakdown:
    """Bytes by part, in the order they are shown."""

    parts: tuple[tuple[str, float], ...]

    @property
    def total(self) -> float:
        return sum(value for _, value in self.parts)

    def part(self, name: str) -> float:
        return sum(value for label, value in self.parts if label == name)

    def describe(self) -> str:
        """`weights 20.5 + cache 48.0` (GiB, one decimal)."""
        return " + ".join(f"{name} {value / GIB:.1f}" for name, value in self.parts if value)


@dataclass(frozen=True)
class Kernels:
    """Bytes PyTorch keeps per element, where they depend on the device (module docstring)."""

    mask: float | None  # dropout mask; None: the activation dtype's size
    attention: float | None  # q, k, v, attention output; None: the activation dtype's
    scores: float | None  # per attention score in training; None: the activation dtype's
    scores_dropout: float | None  # the same with attention dropout
    scores_inference: float | None  # per score while generating, beside the dtype's bias


DEVICES: dict[DeviceKind, Kernels] = {
    # SDPA's math path in fp32: probabilities 4 B, then dropout's mask 4 B and output 4 B.
    "cpu": Kernels(mask=None, attention=4, scores=4, scores_dropout=12, scores_inference=8),
    # Memory-efficient SDPA: the bias only; its dropout keeps an RNG offset, not a mask.
    "cuda": Kernels(mask=1, attention=None, scores=None, scores_dropout=None, scores_inference=0),
}


def _bytes(value: float | None, dtype_bytes: int) -> float:
    return float(dtype_bytes) if value is None else value


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


@dataclass(frozen=True)
class Lengths:
    """One micro-batch (or generation batch): sequences and tokens per sequence."""

    batch: int
    source: int
    target: int


def encoder_layer_bytes(
    shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind
) -> float:
    """What one encoder layer keeps for backward, for the whole micro-batch."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    e = shape.encoder
    mask = _bytes(k.mask, s)
    per_token = (
        2 * norm_bytes(s) * e.hidden
        + (2 * mask * e.hidden if e.dropout else 0)
        + 4 * _bytes(k.attention, s) * e.inner
        + ffn_bytes(e, s, mask)
    )
    scores = _bytes(k.scores_dropout if e.dropout else k.scores, s)
    tokens = lengths.batch * lengths.source
    return tokens * per_token + lengths.batch * e.heads * lengths.source**2 * scores


def decoder_layer_bytes(
    shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind
) -> float:
    """What one decoder layer (self- and cross-attention) keeps for backward."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    d = shape.decoder
    mask = _bytes(k.mask, s)
    attention = _bytes(k.attention, s)
    per_target = (
        3 * norm_bytes(s) * d.hidden
        + (3 * mask * d.hidden if d.dropout else 0)
        + (4 + 2) * attention * d.inner  # self q, k, v, out; cross q, out
        + ffn_bytes(d, s, mask)
    )
    per_source = 2 * attention * d.inner  # cross-attention keys and values
    scores = _bytes(k.scores_dropout if d.dropout else k.scores, s)
    b, src, tgt = lengths.batch, lengths.source, lengths.target
    return b * (tgt * per_target + src * per_source) + b * d.heads * (tgt**2 + tgt * src) * scores


def _edges(shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind) -> float:
    """Outside the layers: embedding dropout, final norm and dropout, the encoder output
    and the LM head's input per token, and the log-softmax over the vocabulary."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    mask = _bytes(k.mask, s)
    total = 0.0
    for stack, tokens in (
        (shape.encoder, lengths.batch * lengths.source),
        (shape.decoder, lengths.batch * lengths.target),
    ):
        per_token = norm_bytes(s) + s + (2 * mask if stack.dropout else 0)
        total += tokens * per_token * stack.hidden
    return total + lengths.batch * lengths.target * shape.vocab * s


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
    gradients beside what is kept, and for the gradient of the logits.
    """
    s = DTYPE_BYTES[dtype]
    enc = encoder_layer_bytes(shape, lengths, dtype, device)
    dec = decoder_layer_bytes(shape, lengths, dtype, device)
    largest = max(enc, dec)
    if checkpointing:
        kept = float(s) * (
            shape.encoder.layers * lengths.batch * lengths.source * shape.encoder.hidden
            + shape.decoder.layers * lengths.batch * lengths.target * shape.decoder.hidden
        )
        working = 2 * largest  # the recomputed block and its gradients
    else:
        kept = shape.encoder.layers * enc + shape.decoder.layers * dec
        working = largest
    logits_grad = lengths.batch * lengths.target * shape.vocab * s
    return kept + _edges(shape, lengths, dtype, device) + working + logits_grad


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
    scores = batch * e.heads * source**2 * (s + _bytes(k.scores_inference, s))
    encoder_pass = layer_hidden + scores + tokens * e.hidden * s
    cross, self_ = cache_bytes(
        shape, sequences=sequences, source=source, new_tokens=new_tokens, dtype=dtype
    )
    reorder = (cross + self_) / d.layers if beams > 1 else 0.0
    step = sequences * source * e.hidden * s + 3 * sequences * shape.vocab * 4 + reorder
    return max(encoder_pass, step)


def generation_memory(
    shape: ModelShape,
    *,
    batch: int,
    beams: int,
    source: int,
    new_tokens: int,
    dtype: str,
    device: DeviceKind,
) -> Breakdown:
    """Peak memory of one generating process (on its GPU, or its RSS on CPU)."""
    cross, self_ = cache_bytes(
        shape, sequences=batch * beams, source=source, new_tokens=new_tokens, dtype=dtype
    )
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
            ("weights", float(shape.parameters * DTYPE_BYTES[dtype])),
            ("cache", cross + self_),
            ("working", working),
            ("runtime", runtime_bytes(device, "generate")),
        )
    )


def runtime_bytes(device: DeviceKind, kind: Literal["train", "generate"]) -> float:
    """The process's own memory on its device (module constants)."""
    return (CPU_RUNTIME_GIB[kind] if device == "cpu" else CUDA_RUNTIME_GIB) * GIB
