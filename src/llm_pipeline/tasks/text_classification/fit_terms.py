"""The fit check's terms for a classifier: its shape, and the peak memory of one process that
trains it or runs it forward. `TextClassification.fit_terms` hands this module to the fit
layer (a `fit.shapes.FitTerms`), which calls `shape_of`, `activation_bytes` and
`forward_memory` in place of its seq2seq and causal-LM formulas.

A classifier is an encoder stack (BERT, DistilBERT, RoBERTa, MiniLM, DeBERTa, counted as
BERT's layout: the model types transformers builds a masked LM of) or a causal LM's decoder
stack (Llama, OPT), with a small head over one token's hidden state, built
(`AutoModelForSequenceClassification`) for the number of labels the task says
(`Task.fit_labels`); under LoRA the head trains whole beside the adapters. It reads
`data.max_length` tokens and writes no tokens: no target side, no LM head over the
vocabulary, no generation cache.

An encoder layer (BERT's: attention, then a LayerNorm of the residual sum; a feed-forward,
then another) keeps for backward, per token, with `s` the activation dtype's bytes:

* q, k and v as the attention kernel has them (on CPU SDPA's math path upcasts them to
  fp32, then keeps the fp32 probabilities per head and score, and with attention dropout its
  mask and output too; on CUDA the memory-efficient kernel keeps its output, one fp32
  log-sum-exp per head and the padding bias it is given);
* both LayerNorms' inputs and statistics (fp32 on CUDA, in the dtype on CPU), and each
  residual dropout's mask (BERT has two per layer, DistilBERT one);
* the feed-forward activation's input (GELU; ReLU keeps its output instead);
* what only a weight's gradient needs, only when the weights train: the layer's input (the
  q, k, v projections'), the attention output (the output projection's), the first
  LayerNorm's output (the feed-forward's) and the activation's output (the down
  projection's).

A decoder stack's layers are `fit.decoder_only.layer_bytes`. Around the layers: the token
ids, the embeddings' LayerNorm and dropout (an encoder's) or the final norm (a decoder's),
and the last hidden states, which the head keeps whole (a slice of one token keeps its
tensor; a decoder's score layer reads every position). The head and the loss are a few
numbers per row. `tests/tasks/text_classification/test_fit_terms.py` checks these counts
against what autograd keeps, on CPU.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from llm_pipeline.config import LoraSettings
from llm_pipeline.fit import decoder_only
from llm_pipeline.fit.adapters import count_adapters
from llm_pipeline.fit.memory import (
    DEVICES,
    DTYPE_BYTES,
    Breakdown,
    DeviceKind,
    Lengths,
    kernel_bytes,
    runtime_bytes,
)
from llm_pipeline.fit.shapes import (
    ModelShape,
    ShapeUnavailable,
    Stack,
    causal_stack,
    config_value,
    count_parameters,
    first_layer,
    meta_model,
    optional_value,
)
from llm_pipeline.tasks.kinds import ModelKind

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig

#: Bytes per token of its ids: input ids, and BERT's token type ids (int64).
TOKEN_ID_BYTES = 16


def shape_of(
    config: PretrainedConfig,
    *,
    name: str,
    note: str | None,
    kind: ModelKind,
    lora: LoraSettings | None,
    labels: int,
) -> ModelShape:
    """A classifier's shape: an encoder's stack or a decoder's, its head for `labels` labels
    (forward only in evaluation and serving: no generation settings). Raises
    ShapeUnavailable."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    from llm_pipeline.models.builders import head_modules

    if getattr(config, "is_encoder_decoder", False):
        raise ShapeUnavailable(
            f"{config.model_type} is an encoder-decoder: the fit check estimates classifiers "
            "that are an encoder or a decoder"
        )
    config = copy.deepcopy(config)
    config.num_labels = labels
    model = meta_model(config, kind)
    total, largest, _ = count_parameters(model, config)
    if config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        encoder = _encoder_stack(config, model)
        decoder = replace(encoder, layers=0)
    else:
        decoder = causal_stack(config, model)
        encoder = replace(decoder, layers=0)
    head = head_modules(model)  # type: ignore[arg-type]  # a PreTrainedModel on meta
    return ModelShape(
        name=name,
        parameters=total,
        largest_layer_parameters=largest,
        encoder_parameters=0,
        encoder=encoder,
        decoder=decoder,
        vocab=int(config.vocab_size),
        default_max_length=0,
        default_num_beams=1,
        source_note=note,
        kind=kind,
        adapters=count_adapters(model, lora, whole=head) if lora is not None else None,
        labels=labels,
        max_positions=optional_value(config, "max_position_embeddings", "n_positions"),
    )


def _encoder_stack(config: Any, model: nn.Module) -> Stack:
    """An encoder classifier's stack (BERT's layout: attention and feed-forward, each followed
    by a LayerNorm of the residual sum): widths from the config under BERT's and DistilBERT's
    names, its residual dropouts counted in its first layer."""
    from torch import nn

    layers = int(config_value(config, "num_hidden_layers", "n_layers", "num_layers"))
    hidden = int(config_value(config, "hidden_size", "dim", "d_model"))
    attention_dropout = (
        float(optional_value(config, "attention_probs_dropout_prob", "attention_dropout") or 0) > 0
    )
    dropouts = sum(
        1 for m in first_layer(model, layers).modules() if isinstance(m, nn.Dropout) and m.p > 0
    )
    residual = max(dropouts - (1 if attention_dropout else 0), 0)
    return Stack(
        layers=layers,
        hidden=hidden,
        inner=hidden,
        heads=int(config_value(config, "num_attention_heads", "n_heads")),
        ffn=int(config_value(config, "intermediate_size", "hidden_dim", "ffn_dim")),
        gated=False,
        dropout=residual > 0,
        layer_norm=True,
        relu=str(optional_value(config, "hidden_act", "activation") or "") == "relu",
        attention_dropout=attention_dropout,
        residual_dropouts=residual,
    )


def is_encoder(shape: ModelShape) -> bool:
    """Whether the classifier's stack is an encoder (BERT's kind), not a decoder."""
    return shape.encoder.layers > 0


def encoder_layer_bytes(
    shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind
) -> float:
    """What one encoder layer keeps for backward, for the whole micro-batch."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    e, length = shape.encoder, lengths.source
    if device == "cuda":
        # The kernel's output, its log-sum-exp per head, the padding bias per key.
        attention: float = s * e.inner + 4 * e.heads + s * length
        weight_only: float = 0.0  # the attention output is kept whatever trains
    else:
        probabilities = kernel_bytes(k.scores_dropout if e.attention_dropout else k.scores, s)
        attention = e.heads * length * probabilities
        weight_only = s * e.inner
    per_token = (
        3 * kernel_bytes(k.attention, s) * e.inner
        + attention
        + 2 * decoder_only.norm_bytes(e, s, device)
        + e.residual_dropouts * kernel_bytes(k.mask, s) * e.hidden
        + s * e.ffn  # GELU's input, or ReLU's output
    )
    # Inputs of the linear layers that only their weights' gradients need.
    weight_only += s * (2 * e.hidden + (0 if e.relu else e.ffn))
    adapters = shape.adapters
    if adapters is None:
        per_token += weight_only
    else:
        inputs, linears = _adapted_per_layer(shape)
        per_token += s * adapters.rank * linears
        per_token += (kernel_bytes(k.mask, s) + s) * inputs if adapters.dropout else weight_only
    return lengths.sequences * length * per_token


def _adapted_per_layer(shape: ModelShape) -> tuple[float, float]:
    """(input width, linears) adapted per layer of a classifier's one stack."""
    adapters = shape.adapters
    assert adapters is not None
    stack = _stack(shape)
    inputs = sum(n for _, n in adapters.inputs)
    linears = sum(n for _, n in adapters.linears)
    return inputs / stack.layers, linears / stack.layers


def layer_bytes(shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind) -> float:
    """One layer of the classifier's stack, encoder or decoder."""
    if is_encoder(shape):
        return encoder_layer_bytes(shape, lengths, dtype, device)
    return decoder_only.layer_bytes(shape, lengths, dtype, device)


def _edges(shape: ModelShape, lengths: Lengths, dtype: str, device: DeviceKind) -> float:
    """Outside the layers: token ids, the embeddings' LayerNorm and dropout (an encoder's) or
    the final norm and what its weight's gradient needs (a decoder's), the last hidden states
    the head reads, and the head's own few values per row."""
    s, k = DTYPE_BYTES[dtype], DEVICES[device]
    stack = _stack(shape)
    per_token = decoder_only.norm_bytes(stack, s, device) + s * stack.hidden
    if is_encoder(shape):
        per_token += kernel_bytes(k.mask, s) * stack.hidden if stack.dropout else 0
    elif not stack.layer_norm and shape.adapters is None:
        per_token += s * stack.hidden  # what the final RMS norm's weight multiplies
    # The head: a pooled or projected hidden state, its dropout, the logits, the loss.
    per_row = 3 * s * stack.hidden + 4 * shape.labels
    tokens = lengths.sequences * lengths.source
    return tokens * (TOKEN_ID_BYTES + per_token) + lengths.sequences * per_row


def kept_bytes(shape: ModelShape, lengths: Lengths, *, dtype: str, device: DeviceKind) -> float:
    """What stays for backward once the forward is done (no checkpointing)."""
    layers = _stack(shape).layers * layer_bytes(shape, lengths, dtype, device)
    return layers + _edges(shape, lengths, dtype, device)


def activation_bytes(
    shape: ModelShape, lengths: Lengths, *, dtype: str, device: DeviceKind, checkpointing: bool
) -> float:
    """Peak activation memory of one micro-batch's forward and backward.

    As for the other kinds: without checkpointing every layer keeps its tensors until
    backward reaches it; with it a layer keeps only its input and backward recomputes one
    layer at a time; backward needs room for one layer's gradients besides. No logits over
    a vocabulary: the head's are a few per row.
    """
    layer = layer_bytes(shape, lengths, dtype, device)
    stack = _stack(shape)
    if checkpointing:
        tokens = lengths.sequences * lengths.source
        kept = float(DTYPE_BYTES[dtype] * stack.layers * tokens * stack.hidden)
        working = 2 * layer
    else:
        kept = stack.layers * layer
        working = layer
    return kept + _edges(shape, lengths, dtype, device) + working


def forward_working_bytes(
    shape: ModelShape, *, batch: int, tokens: int, dtype: str, device: DeviceKind
) -> float:
    """Besides the weights, a forward pass without gradients: one layer at a time over every
    token (the residual stream, the layer's input and output, q/k/v, the attention output,
    the feed-forward's intermediates), the padding mask per pair of tokens (transformers'
    boolean mask and the float mask the kernel makes of it; no dropout, so neither device
    makes scores per head: CPU runs SDPA's flash kernel, CUDA its memory-efficient one), and
    for a decoder the key/value cache its forward fills (`use_cache` is on by default) and
    the logits per token of its score layer."""
    s = DTYPE_BYTES[dtype]
    stack = _stack(shape)
    count = batch * tokens
    ffn = (3 if stack.gated else 2) * stack.ffn
    per_token = 3 * stack.hidden + 2 * stack.inner + 2 * stack.kv_width + ffn
    mask = batch * tokens**2 * (1 + 4)
    working = float(count * per_token * s + mask)
    if not is_encoder(shape):
        cache = decoder_only.cache_bytes(shape, sequences=batch, tokens=tokens, dtype=dtype)
        working += cache + count * shape.labels * 4
    return working


def forward_memory(
    shape: ModelShape, *, batch: int, tokens: int, dtype: str, device: DeviceKind
) -> Breakdown:
    """Peak memory of one process that classifies `batch` texts of `tokens` tokens: the
    weights, one forward's working memory, the runtime. Nothing grows with generation.
    `device` decides the runtime only."""
    return Breakdown(
        (
            ("weights", float(shape.parameters * DTYPE_BYTES[dtype])),
            (
                "working",
                forward_working_bytes(
                    shape, batch=batch, tokens=tokens, dtype=dtype, device=device
                ),
            ),
            ("runtime", runtime_bytes(device, "generate")),
        )
    )


def _stack(shape: ModelShape) -> Stack:
    return shape.encoder if is_encoder(shape) else shape.decoder
