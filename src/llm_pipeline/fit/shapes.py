"""A model's shape from its config alone: parameter counts and the widths memory scales with.

No weights are read. The config comes from where `model` says (hub id, local folder,
`gs://`/`s3://` folder, `package:`, an architecture dict, or two encoders to warm-start),
and the parameters are counted on a model built on PyTorch's meta device, so every
architecture transformers knows is counted exactly as it will load (tied weights once).
It is built as the task's kind (`tasks.get_task(config.task).model_kind`, its facts read as
fields): a seq2seq model (`encoder_decoder`) has an encoder and a decoder stack; a causal LM
is one decoder stack, whose layer layout (gated feed-forward or not, LayerNorm or RMS norm)
is read from its first layer. A task whose model these do not describe brings its own terms
(`FitTerms`, from `Task.fit_terms`: text classification's encoder or decoder with a head),
which read its shape with the readers here and estimate its memory; the shape carries them.
Under LoRA the shape also carries the adapters PEFT would add (`adapters.py`).

No repository's code runs: configs, tokenizers and the meta model load with
`trust_remote_code=False` whatever `model.trust_remote_code` says, because the fit check
runs where the user compiles and submits, before anything is reviewed. A model that needs its
own code has no shape here (a note says so), or, when transformers knows its `model_type`,
transformers' own class stands in for it (a note says that too).

The hub is asked only when it can be reached (a 3-second connection probe: offline, a
failed request costs half a minute of retries). Otherwise the Hugging Face cache is used,
then `known_models`, the published configs of the models the shipped configs name.
"""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from llm_pipeline.config import LoraSettings, ModelConfig
from llm_pipeline.errors import first_line
from llm_pipeline.fit.adapters import Adapters, count_adapters
from llm_pipeline.fit.known_models import KNOWN_MODELS
from llm_pipeline.fit.memory import Breakdown, DeviceKind, Lengths
from llm_pipeline.models.attention import has_learned_attention_bias
from llm_pipeline.models.sources import is_hub_id, resolve_model_path
from llm_pipeline.storage import is_remote, local_copy
from llm_pipeline.tasks.kinds import SEQ2SEQ, ModelKind

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig

#: How long the hub probe waits for a connection.
HUB_PROBE_TIMEOUT_S = 3.0


class ShapeUnavailable(Exception):
    """The model's config could not be read; the message says why (shown as a note)."""


@dataclass(frozen=True)
class Stack:
    """One side of an encoder-decoder: what activation and cache memory scale with."""

    layers: int
    hidden: int  # d_model
    inner: int  # attention width: heads x head dim (T5's d_kv may make it differ from d_model)
    heads: int
    ffn: int  # feed-forward width
    gated: bool  # gated feed-forward (T5 v1.1's gated-gelu, Llama's SiLU: two input projections)
    dropout: bool  # dropout on (masks are kept for backward)
    # Read for causal LMs' layers only (decoder_only.py):
    kv_inner: int | None = None  # keys' and values' width (grouped-query attention); None: inner
    layer_norm: bool = False  # LayerNorm (OPT, GPT-2) rather than an fp32 RMS norm (Llama)
    relu: bool = True  # the activation keeps its output (ReLU), not its input (SiLU, GELU)
    attention_dropout: bool = False
    # Read for encoder classifiers' layers only (tasks/text_classification/fit_terms.py):
    # dropouts on the residual branches per layer (BERT's after attention and after the
    # feed-forward, DistilBERT's after the feed-forward only).
    residual_dropouts: int = 2

    @property
    def kv_width(self) -> int:
        """Keys' (and values') width per token: what the generation cache holds per layer."""
        return self.kv_inner or self.inner


@dataclass(frozen=True)
class ModelShape:
    """Everything the estimates need to know about a model."""

    name: str  # where it came from, for the table
    parameters: int
    largest_layer_parameters: int  # DeepSpeed's `largest_layer_params`
    encoder_parameters: int  # what train.freeze_encoder keeps out of the optimizer
    encoder: Stack
    decoder: Stack
    vocab: int
    default_max_length: int  # the model's generation config, for unset evaluate fields
    default_num_beams: int
    source_note: str | None = None  # e.g. "offline: google/t5-v1_1-xxl's published config"
    # A causal LM's one stack is `decoder` (`encoder` has 0 layers); a classifier's is
    # `encoder` when it is an encoder, else `decoder`.
    kind: ModelKind = SEQ2SEQ  # what a task trains (`Task.model_kind`)
    adapters: Adapters | None = None  # LoRA's (train.lora); None: every weight trains
    labels: int = 0  # a classifier's head scores this many labels
    max_positions: int | None = None  # the longest input the model takes, when it says
    # The task's own terms that read this shape and estimate its memory; None: this layer's
    # (seq2seq, causal LM).
    terms: FitTerms | None = None
    # Its attention adds a learned bias (T5's): it trains with eager attention on CUDA
    # unless `named_attention` says otherwise (`models.attention.trains_with_eager`).
    learned_attention_bias: bool = False
    # The attention implementation `model.architecture` names, if it names one.
    named_attention: str | None = None
    # The transformers model type and the class the trained model is saved as
    # (`T5ForConditionalGeneration`): what decides its serving engine (`engines`).
    model_type: str = ""
    architecture: str = ""


class FitTerms(Protocol):
    """A task's own fit-check terms (`Task.fit_terms`), for a model the seq2seq and causal-LM
    formulas of this layer do not describe: the fit layer calls them in place of its own for
    the shapes they read. A module with these functions is one (text classification's
    `fit_terms`)."""

    def shape_of(
        self,
        config: PretrainedConfig,
        *,
        name: str,
        note: str | None,
        kind: ModelKind,
        lora: LoraSettings | None,
        labels: int,
    ) -> ModelShape:
        """The shape of a transformers config, built as `kind` (as `shape_of` here)."""
        ...

    def activation_bytes(
        self,
        shape: ModelShape,
        lengths: Lengths,
        *,
        dtype: str,
        device: DeviceKind,
        checkpointing: bool,
    ) -> float:
        """Peak activation memory of one micro-batch's forward and backward
        (`estimates.activation_bytes`)."""
        ...

    def forward_memory(
        self, shape: ModelShape, *, batch: int, tokens: int, dtype: str, device: DeviceKind
    ) -> Breakdown:
        """Peak memory of one process that runs the model forward on `batch` inputs of
        `tokens` tokens, in evaluate and serve (in place of `estimates.generation_memory`:
        the model generates nothing)."""
        ...


def model_shape(
    model: ModelConfig,
    *,
    kind: ModelKind = SEQ2SEQ,
    terms: FitTerms | None = None,
    lora: LoraSettings | None = None,
    labels: int = 2,
) -> ModelShape:
    """The shape of the model `model` describes, built as `kind` (read by `terms`, the
    task's `Task.fit_terms`, when it has its own), with `lora`'s adapters (a classifier's
    head scoring `labels` labels).

    Raises ShapeUnavailable."""
    try:
        config, name, note = _config(model)
        shape = shape_of(
            config, name=name, note=note, kind=kind, terms=terms, lora=lora, labels=labels
        )
    except ShapeUnavailable as exc:
        if model.trust_remote_code:
            raise ShapeUnavailable(f"{exc}; {_NO_REMOTE_CODE}") from exc
        raise
    named = (model.architecture or {}).get("attn_implementation")
    if named is not None:
        shape = replace(shape, named_attention=str(named))
    if model.trust_remote_code:
        own = config.model_type
        stand_in = f"estimated with transformers' own {own!r} classes: {_NO_REMOTE_CODE}"
        shape = replace(shape, source_note="; ".join(filter(None, [shape.source_note, stand_in])))
    return shape


#: Why a model with `trust_remote_code` may have no shape, or an approximate one.
_NO_REMOTE_CODE = "the fit check never runs a repository's code (model.trust_remote_code)"


def shape_of(
    config: PretrainedConfig,
    *,
    name: str,
    note: str | None = None,
    kind: ModelKind = SEQ2SEQ,
    terms: FitTerms | None = None,
    lora: LoraSettings | None = None,
    labels: int = 2,
) -> ModelShape:
    """The shape of a transformers config (built on the meta device to count parameters):
    read by `terms` when the task has its own, which the shape then carries."""
    from transformers import GenerationConfig

    if terms is not None:
        shape = terms.shape_of(config, name=name, note=note, kind=kind, lora=lora, labels=labels)
        return replace(shape, terms=terms)
    if not (kind.encoder_decoder or kind.causal):
        raise ValueError(
            f"this layer reads seq2seq models and causal LMs: a {kind.description}'s shape is "
            "read by its task's terms (Task.fit_terms)"
        )
    model = meta_model(config, kind)
    total, largest, encoder_parameters = count_parameters(model, config)
    generation = GenerationConfig.from_model_config(config)
    if kind.encoder_decoder:
        encoder = _stack(getattr(config, "encoder", config), decoder=False)
        decoder = _stack(getattr(config, "decoder", config), decoder=True)
    else:
        decoder = causal_stack(config, model)
        encoder = replace(decoder, layers=0)
    return ModelShape(
        name=name,
        parameters=total,
        largest_layer_parameters=largest,
        encoder_parameters=encoder_parameters,
        encoder=encoder,
        decoder=decoder,
        vocab=int(getattr(config, "decoder", config).vocab_size),
        default_max_length=int(generation.max_length or 20),
        default_num_beams=int(generation.num_beams or 1),
        source_note=note,
        kind=kind,
        adapters=count_adapters(model, lora) if lora is not None else None,
        learned_attention_bias=has_learned_attention_bias(model),
        model_type=str(config.model_type),
        architecture=type(model).__name__,
    )


def config_value(config: Any, *names: str) -> Any:
    """The first of `names` the config sets; ShapeUnavailable if it sets none."""
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    raise ShapeUnavailable(
        f"{type(config).__name__} has none of {', '.join(names)}: the fit check cannot read "
        "its shape"
    )


def _stack(config: Any, *, decoder: bool) -> Stack:
    """Widths of one side, under the names T5, BART-style and BERT-style configs use."""
    side = "decoder" if decoder else "encoder"
    layer_names = ("num_decoder_layers", "decoder_layers") if decoder else ("encoder_layers",)
    hidden = int(config_value(config, "d_model", "hidden_size", "n_embd"))
    heads = int(config_value(config, f"{side}_attention_heads", "num_heads", "num_attention_heads"))
    head_dim = getattr(config, "d_kv", None)
    return Stack(
        layers=int(config_value(config, *layer_names, "num_layers", "num_hidden_layers")),
        hidden=hidden,
        inner=int(head_dim) * heads if head_dim else hidden,
        heads=heads,
        ffn=int(config_value(config, "d_ff", f"{side}_ffn_dim", "intermediate_size", "ffn_dim")),
        gated=bool(getattr(config, "is_gated_act", False)),
        dropout=float(config_value(config, "dropout_rate", "dropout", "hidden_dropout_prob")) > 0,
    )


def meta_model(config: PretrainedConfig, kind: ModelKind) -> nn.Module:
    """The model as the finetune step builds it, on PyTorch's meta device (no memory)."""
    import torch
    import transformers
    from transformers import EncoderDecoderModel
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "some weights are newly initialised" and the like
    try:
        with torch.device("meta"):
            model: Any
            if kind.encoder_decoder and config.model_type == "encoder-decoder":
                model = EncoderDecoderModel(config=config)  # two checkpoints warm-started
            else:
                auto = getattr(transformers, kind.auto_class)
                model = auto.from_config(config, trust_remote_code=False)
    except (ValueError, KeyError, TypeError) as exc:
        raise ShapeUnavailable(
            f"not a {kind.description} transformers can build ({first_line(exc)})"
        ) from exc
    finally:
        hf_logging.set_verbosity(verbosity)
    return model


def count_parameters(model: nn.Module, config: PretrainedConfig) -> tuple[int, int, int]:
    """(all parameters, the largest module's own, an encoder's), counted as DeepSpeed's
    `model_to_params` counts them."""
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    if getattr(config, "scale_decoder_outputs", True) is False:
        # T5 v1.1 (t5-v1_1-*, flan-t5): transformers 5 builds T5 with its LM head tied to the
        # embedding, but a v1.1 checkpoint holds a head of its own, which loading keeps apart.
        total += int(config.vocab_size) * int(config.d_model)
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    encoder = 0
    if getattr(config, "is_encoder_decoder", False):
        encoder_model: Any = model.get_encoder()  # type: ignore[operator]
        encoder = sum({id(p): p.numel() for p in encoder_model.parameters()}.values())
    return int(total), int(largest), int(encoder)


def causal_stack(config: Any, model: nn.Module) -> Stack:
    """A decoder-only stack: widths from the config, the layer layout from its first layer."""
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    hidden = int(config_value(config, "hidden_size", "n_embd", "d_model"))
    heads = int(config_value(config, "num_attention_heads", "n_head", "num_heads"))
    layers = int(config_value(config, "num_hidden_layers", "n_layer", "num_layers"))
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    ffn = optional_value(config, "intermediate_size", "ffn_dim", "n_inner") or 4 * hidden  # GPT-2
    first = first_layer(model, layers)
    linears = [m for m in first.modules() if isinstance(m, nn.Linear | Conv1D)]
    into_ffn = sum(1 for m in linears if _linear_sizes(m) == (hidden, int(ffn)))
    activation = str(optional_value(config, "hidden_act", "activation_function") or "")
    return Stack(
        layers=layers,
        hidden=hidden,
        inner=heads * head_dim,
        heads=heads,
        ffn=int(ffn),
        gated=into_ffn >= 2,
        dropout=float(optional_value(config, "dropout", "resid_pdrop", "hidden_dropout") or 0) > 0,
        kv_inner=kv_heads * head_dim,
        layer_norm=any(isinstance(m, nn.LayerNorm) for m in first.modules()),
        relu=activation == "relu",
        attention_dropout=float(
            optional_value(
                config, "attention_dropout", "attn_pdrop", "attention_probs_dropout_prob"
            )
            or 0
        )
        > 0,
    )


def first_layer(model: nn.Module, layers: int) -> nn.Module:
    """The first of the model's `layers` transformer layers (its ModuleList of that length)."""
    from torch import nn

    first = next(
        (m[0] for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == layers),
        None,
    )
    if first is None:
        raise ShapeUnavailable(f"{type(model).__name__}: its {layers} layers not found")
    return first


def _linear_sizes(module: Any) -> tuple[int, int]:
    """(in, out) of an nn.Linear or of GPT-2's Conv1D (whose weight is in x out)."""
    if hasattr(module, "in_features"):
        return int(module.in_features), int(module.out_features)
    size_in, size_out = module.weight.shape
    return int(size_in), int(size_out)


def optional_value(config: Any, *names: str) -> Any:
    """The first of `names` the config sets, else None."""
    return next((v for n in names if (v := getattr(config, n, None)) is not None), None)


def _config(model: ModelConfig) -> tuple[PretrainedConfig, str, str | None]:
    """The model's transformers config, a name for it, and a note on where it came from."""
    from transformers import AutoConfig, EncoderDecoderConfig

    if model.architecture is not None:
        settings = dict(model.architecture)
        model_type = settings.pop("model_type")
        if "vocab_size" not in settings:
            settings["vocab_size"] = _tokenizer_size(model)
        try:
            config = AutoConfig.for_model(model_type, **settings)
        except (ValueError, KeyError, TypeError) as exc:
            raise ShapeUnavailable(f"model.architecture: {first_line(exc)}") from exc
        return config, f"architecture ({model_type})", None
    if model.encoder_decoder is not None:
        pair = model.encoder_decoder
        encoder, note_e = _source_config(pair.encoder, model, key="model.encoder_decoder.encoder")
        decoder, note_d = _source_config(pair.decoder, model, key="model.encoder_decoder.decoder")
        config = EncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
        config.tie_encoder_decoder = pair.tie_encoder_decoder
        name = pair.encoder if pair.encoder == pair.decoder else f"{pair.encoder} + {pair.decoder}"
        return config, name, note_e or note_d
    if model.warm_start_decoder is not None:
        # An encoder checkpoint built as a causal decoder (models/decoder_only.py): the same
        # weights, self-attention looking back only.
        source = model.warm_start_decoder
        config, note = _source_config(source, model, key="model.warm_start_decoder")
        config.is_decoder = True
        return config, source, note
    assert model.source is not None  # ModelConfig guarantees exactly one source
    config, note = _source_config(model.source, model, key="model.source")
    return config, model.source, note


def _source_config(
    source: str, model: ModelConfig, *, key: str
) -> tuple[PretrainedConfig, str | None]:
    """The config of one checkpoint location, reading config.json and nothing else."""
    from transformers import AutoConfig

    revision = model.revision if source == model.source else None
    trust = False  # never the repository's code (module docstring)
    if is_remote(source):
        with tempfile.TemporaryDirectory(prefix="fit-config-") as folder:
            try:
                local_copy(f"{source.rstrip('/')}/config.json", folder)
                return AutoConfig.from_pretrained(folder, trust_remote_code=trust), None
            except Exception as exc:
                raise ShapeUnavailable(f"{key} {source!r}: {first_line(exc)}") from exc
    try:
        path = resolve_model_path(source)
    except Exception as exc:
        raise ShapeUnavailable(f"{key} {source!r}: {first_line(exc)}") from exc
    if not is_hub_id(source, path):
        try:
            return AutoConfig.from_pretrained(path, trust_remote_code=trust), None
        except Exception as exc:
            raise ShapeUnavailable(f"{key} {source!r}: {first_line(exc)}") from exc
    online = hub_reachable()
    try:
        config = AutoConfig.from_pretrained(
            source, revision=revision, trust_remote_code=trust, local_files_only=not online
        )
        return config, None
    except Exception as exc:
        if source in KNOWN_MODELS:
            settings = dict(KNOWN_MODELS[source])
            config = AutoConfig.for_model(settings.pop("model_type"), **settings)
            return config, f"{source}: the hub cannot be reached; used its published config"
        why = "the hub cannot be reached and it is not cached" if not online else first_line(exc)
        raise ShapeUnavailable(f"{key} {source!r}: {why}") from exc


def _tokenizer_size(model: ModelConfig) -> int:
    """len(tokenizer): what an architecture without vocab_size gets when the model is built."""
    from llm_pipeline.models.sources import load_tokenizer

    try:
        return len(load_tokenizer(model.model_copy(update={"trust_remote_code": False})))
    except Exception as exc:
        raise ShapeUnavailable(
            f"model.architecture has no vocab_size and the tokenizer {model.tokenizer!r} "
            f"could not be read ({first_line(exc)})"
        ) from exc


@cache
def hub_reachable() -> bool:
    """Whether the Hugging Face hub answers a TCP connection (never, with HF_HUB_OFFLINE)."""
    from huggingface_hub import constants

    # huggingface_hub reads HF_HUB_OFFLINE once, on import; a caller may set it later.
    flags = (os.environ.get(name, "") for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    if constants.HF_HUB_OFFLINE or any(
        flag.upper() in ("1", "ON", "YES", "TRUE") for flag in flags
    ):
        return False
    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=HUB_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


__all__ = [
    "FitTerms",
    "ModelKind",
    "ModelShape",
    "ShapeUnavailable",
    "Stack",
    "causal_stack",
    "config_value",
    "count_parameters",
    "first_layer",
    "hub_reachable",
    "meta_model",
    "model_shape",
    "optional_value",
    "shape_of",
]
