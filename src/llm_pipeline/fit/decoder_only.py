"""Peak memory of one process that trains, or generates with, a causal LM (decoder-only).

The formulas count what PyTorch keeps for backward, tensor by tensor, for the two layer
layouts transformers 5 builds for the models this project names: Llama's (an RMS norm that
computes in fp32, attention with rotary positions, a gated SiLU feed-forward; Qwen, Mistral
and Gemma share it) and OPT's (LayerNorm, attention, ReLU feed-forward, dropout on both
residual branches). GPT-2-style layers are counted as OPT's. Per token of one layer, with
`s` the activation dtype's bytes:

* each norm keeps its input and its statistics: the fp32 copy and rsqrt of an RMS norm
  (`4h + 4`), a LayerNorm's input and mean/rstd (`s·h + 8` on CUDA, `s·h + 2s` on CPU);
* attention keeps q (after rotary), k, v and the output (`4·s·inner`: keys and values are
  repeated to every head, as transformers does whenever a padding mask is passed), the flash
  kernel's fp32 log-sum-exp per head, and the additive mask SDPA makes of the padding mask
  (`s` per pair of tokens: batches are padded to their longest sequence); with attention
  dropout the CPU runs SDPA's math path, which keeps the probabilities per head instead;
* the feed-forward keeps `3·s·ffn` when gated (gate projection, its activation, up
  projection) and `s·ffn` when not (ReLU's output);
* dropout keeps its mask after attention and after the feed-forward;
* what only a weight's gradient needs, only when that weight trains: the normalised value an
  RMS norm's weight multiplies (`s·h` each), and each linear layer's input: both norms'
  outputs and the down projection's input (the gated product, or a non-ReLU activation).

Under LoRA (`shape.adapters`) the base weights are frozen, so that last group is not kept;
each adapted linear keeps its dropout's mask and output (`(mask + s)·in`) and the rank-wide
output of its `A` (`s·r`), or, without adapter dropout, its input. Loss: the finetune step's
upcasts the logits to fp32 and log-softmax keeps its fp32 output (`4·vocab`), as
transformers' own causal LM loss does.

`tests/fit/test_decoder_only.py` checks these counts against what autograd keeps, on CPU.
"""

from __future__ import annotations

from llm_pipeline.fit.memory import DEVICES, DTYPE_BYTES, DeviceKind, Lengths, kernel_bytes
from llm_pipeline.fit.shapes import ModelShape, Stack

#: An RMS norm keeps its fp32 input and rsqrt per token.
RMS_NORM_EXTRA = 4


def norm_bytes(stack: Stack, s: int, device: DeviceKind) -> float:
    """What one norm keeps per token whatever trains: its input and statistics (a
    LayerNorm's mean and rstd are fp32 on CUDA, in the input's dtype on CPU)."""
    if stack.layer_norm:
        return s * stack.hidden + 2 * (4 if device == "cuda" else s)
    return 4 * stack.hidden + RMS_NORM_EXTRA


def _linear_inputs(stack: Stack, s: int) -> float:
    """Per token: the inputs of a layer's linear projections that only their weights'
    gradients need (the attention output is kept by attention anyway)."""
    down = stack.ffn if stack.gated or not stack.relu else 0
    return s * (2 * stack.hidden + down)


def layer_bytes(shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind) -> float:
    """What one decoder layer keeps for backward, for the whole micro-batch."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    d, tokens, length = shape.decoder, lengths.sequences * lengths.source, lengths.source
    mask = kernel_bytes(k.mask, s)
    math_path = d.attention_dropout and k.causal_scores_dropout > 0
    per_token = (
        2 * norm_bytes(d, s, device)
        + 4 * s * d.inner
        + (d.heads * length * k.causal_scores_dropout if math_path else 4 * d.heads)
        + length * s  # the additive padding mask
        + (3 if d.gated else 1) * s * d.ffn
        + (2 * mask * d.hidden if d.dropout else 0)
    )
    adapters = shape.adapters
    if adapters is None:
        per_token += (0 if d.layer_norm else 2 * s * d.hidden) + _linear_inputs(d, s)
    else:
        inputs, linears = adapters.per_layer("decoder", d.layers)
        per_token += s * adapters.rank * linears
        if adapters.dropout:
            per_token += (mask + s) * inputs
        else:
            per_token += _linear_inputs(d, s)
    return tokens * per_token


def _edges(shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind) -> float:
    """Outside the layers: the final norm (and, when they train, its normalised value and
    the LM head's input) and the fp32 log-softmax of the loss."""
    s, d = DTYPE_BYTES[dtype], shape.decoder
    per_token = norm_bytes(d, s, device) + 4 * shape.vocab
    if shape.adapters is None:
        per_token += (0 if d.layer_norm else s * d.hidden) + s * d.hidden
    return lengths.sequences * lengths.source * per_token


def logits_working_bytes(shape: ModelShape, lengths: Lengths, dtype: str) -> float:
    """Room for the logits around the loss, at the end of the forward: the finetune step's
    loss (`train.trainer.token_mean_loss`) shifts them, which makes flattening them a copy,
    and upcasts that to fp32 for cross-entropy (a no-op in fp32); backward then needs about
    as much for their gradients."""
    s = DTYPE_BYTES[dtype]
    return lengths.sequences * lengths.source * shape.vocab * (2 * s + (4 if s != 4 else 0))


def activation_bytes(
    shape: ModelShape, lengths: Lengths, *, dtype: str, device: DeviceKind, checkpointing: bool
) -> float:
    """Peak activation memory of one micro-batch's forward and backward.

    As for seq2seq models (`estimates.activation_bytes`): without checkpointing every layer
    keeps its tensors until backward reaches it; with it a layer keeps only its input and
    backward recomputes one layer at a time; backward needs room for one layer's gradients
    and for the logits'.
    """
    layer = layer_bytes(shape, lengths, dtype, device)
    d = shape.decoder
    if checkpointing:
        kept = float(DTYPE_BYTES[dtype] * d.layers * lengths.sequences * lengths.source * d.hidden)
        working = 2 * layer
    else:
        kept = d.layers * layer
        working = layer
    edges = _edges(shape, lengths, dtype, device)
    return kept + edges + working + logits_working_bytes(shape, lengths, dtype)


def kept_bytes(shape: ModelShape, lengths: Lengths, *, dtype: str, device: DeviceKind) -> float:
    """What stays for backward once the forward is done (no checkpointing): every layer's and
    the edges', without the room backward needs on top (for tests against autograd)."""
    layers = shape.decoder.layers * layer_bytes(shape, lengths, dtype, device)
    return layers + _edges(shape, lengths, dtype, device)


def scoring_pass_bytes(shape: ModelShape, *, sequences: int, tokens: int, dtype: str) -> float:
    """Besides weights: a no-grad forward of `sequences` whole sequences of `tokens` that
    keeps every position's logits, as an evaluation that scores answers runs it (DPO's
    `pair_logps`). Its layers run one at a time (what a prompt's pass holds, as in
    `generation_working_bytes`); then the logits over the vocabulary are all kept, in the
    model's dtype, while TRL's `selective_log_softmax` works through them one sequence at a
    time (an fp32 copy of one sequence's)."""
    s, d = DTYPE_BYTES[dtype], shape.decoder
    per_token = 2 * d.hidden + 2 * d.inner + 2 * d.kv_width + (3 if d.gated else 2) * d.ffn
    layer = sequences * tokens * per_token * s + sequences * tokens**2 * s
    logits = sequences * tokens * shape.vocab * s
    one_sequence = tokens * shape.vocab * 4
    return float(max(layer, logits + one_sequence))


def cache_bytes(shape: ModelShape, *, sequences: int, tokens: int, dtype: str) -> float:
    """Keys and values of every layer for `sequences` of `tokens` (prompt and new tokens)."""
    d = shape.decoder
    return float(2 * d.layers * sequences * tokens * d.kv_width * DTYPE_BYTES[dtype])


def generation_working_bytes(
    shape: ModelShape,
    *,
    batch: int,
    beams: int,
    prompt: int,
    new_tokens: int,
    dtype: str,
) -> float:
    """Besides weights and cache: the larger of the prompt's pass and a decoding step.

    transformers expands the batch to its beams before the first pass, which runs one layer
    at a time over every prompt token (hidden states, q/k/v, the attention output, the
    feed-forward's intermediates, the padding mask) and keeps only the last position's
    logits; every step then holds the logits over the vocabulary in fp32 (logits,
    log-softmax, beam scores) and, under beam search, a copy of one layer's cache while it
    is reordered.
    """
    s, d = DTYPE_BYTES[dtype], shape.decoder
    sequences = batch * beams
    tokens = sequences * prompt
    per_token = 2 * d.hidden + 2 * d.inner + 2 * d.kv_width + (3 if d.gated else 2) * d.ffn
    logits = 3 * sequences * shape.vocab * 4
    prompt_pass = tokens * per_token * s + sequences * prompt**2 * s + logits
    cache = cache_bytes(shape, sequences=sequences, tokens=prompt + new_tokens, dtype=dtype)
    reorder = cache / d.layers if beams > 1 else 0.0
    return max(prompt_pass, logits + reorder)
