"""Build the network to fine-tune from a `ModelConfig`: a seq2seq model, a causal LM or a
classifier.

The task's model kind (`tasks.ModelKind`) picks the `AutoModelFor...` class. The weights come
from a pretrained checkpoint (hub id, folder, `gs://`, `package:`), a random initialisation
from an architecture config plus a named tokenizer, an encoder-decoder warm-started from two
encoder checkpoints (seq2seq), or a causal decoder warm-started from one encoder checkpoint
(causal LM); a classifier is built, for its labels, in `classifier.py`. Weights load from
safetensors where a checkpoint has them; one that ships only
`pytorch_model.bin` (google/t5-v1_1-xxl does) is read with torch's `weights_only` unpickler,
which takes tensors and plain containers and refuses anything that would run code.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from llm_pipeline.config import ModelConfig
from llm_pipeline.errors import ModelError, first_line
from llm_pipeline.models.sources import is_hub_id, resolve_model_path
from llm_pipeline.tasks import ModelKind

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

#: How every checkpoint's weights are read: safetensors first, else `.bin` through torch's
#: `weights_only` unpickler (transformers' default, stated here so that no change of it
#: ever turns on full unpickling).
SAFE_WEIGHTS: dict[str, Any] = {"use_safetensors": None, "weights_only": True}


#: What each model kind is called in messages.
_KIND_WORDS: dict[str, str] = {
    "seq2seq": "seq2seq model",
    "causal_lm": "causal LM",
    "classifier": "classifier",
}


def load_model(
    model: ModelConfig,
    tokenizer: PreTrainedTokenizerBase,
    *,
    kind: ModelKind = "seq2seq",
    labels: Mapping[str, Any] | None = None,
) -> PreTrainedModel:
    """The `kind` of model `model` describes, its special-token ids matching `tokenizer`.

    A classifier needs `labels`: the config fields of the labels it scores
    (`data.labels.LabelSet.model_config_fields()`). Raises ModelError naming the config key,
    the location tried and why it failed.
    """
    if kind == "causal_lm":
        from llm_pipeline.models.decoder_only import build_causal_lm

        return build_causal_lm(model, tokenizer)
    if kind == "classifier":
        from llm_pipeline.models.classifier import build_classifier

        if labels is None:
            raise ModelError("a classifier is built for a label set, and none was given")
        return build_classifier(model, tokenizer, labels)
    if model.warm_start_decoder is not None:
        raise ModelError(
            "model.warm_start_decoder builds a causal LM; this task trains a seq2seq model: "
            "use model.encoder_decoder to warm-start one from encoder checkpoints"
        )
    if model.architecture is not None:
        return _from_architecture(model.architecture, tokenizer)
    if model.encoder_decoder is not None:
        pair = model.encoder_decoder
        return _warm_started_encoder_decoder(
            pair.encoder, pair.decoder, tokenizer, tie=pair.tie_encoder_decoder, model=model
        )
    assert model.source is not None  # ModelConfig guarantees exactly one source
    return pretrained(model.source, model=model)


def freeze_encoder(model: PreTrainedModel) -> None:
    """Stop the encoder's weights from training (`train.freeze_encoder`)."""
    get_encoder = getattr(model, "get_encoder", None)
    if not callable(get_encoder):
        raise ModelError(f"train.freeze_encoder: a {type(model).__name__} has no encoder to freeze")
    get_encoder().requires_grad_(False)


def hidden_size(model: ModelConfig) -> int | None:
    """The model's hidden width, read from its config alone (no weights), or None if unknown.

    DeepSpeed sizes its communication buckets from it; it is needed before the weights load,
    because under ZeRO-3 they are partitioned as they load.
    """
    from transformers import AutoConfig

    try:
        if model.architecture is not None:
            settings = dict(model.architecture)
            config = AutoConfig.for_model(settings.pop("model_type"), **settings)
        else:
            source = model.source or model.warm_start_decoder or model.tokenizer_source
            if model.encoder_decoder is not None:
                source = model.encoder_decoder.encoder
            config = AutoConfig.from_pretrained(
                resolve_model_path(source),
                revision=model.revision if source == model.source else None,
                trust_remote_code=model.trust_remote_code,
            )
    except Exception:
        return None  # load_model reports the real problem, with what it tried
    for name in ("hidden_size", "d_model", "n_embd"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """pad / eos / decoder-start ids a seq2seq config needs, read from the tokenizer.

    BERT-style tokenizers (MiniLM) have no eos or bos: their [SEP] ends every sequence the
    tokenizer makes, so it is the eos, and [CLS] starts the decoder as in BERT2BERT.
    """
    pad = tokenizer.pad_token_id
    if pad is None:
        raise ModelError(
            f"tokenizer {tokenizer.name_or_path!r} has no pad token; seq2seq batches are "
            "padded, so use a tokenizer that defines one"
        )
    eos = first_id(tokenizer, "eos_token_id", "sep_token_id")
    start = first_id(tokenizer, "bos_token_id", "cls_token_id")
    return {
        "pad_token_id": pad,
        "eos_token_id": eos if eos is not None else pad,
        "decoder_start_token_id": start if start is not None else pad,
    }


def first_id(tokenizer: PreTrainedTokenizerBase, *names: str) -> int | None:
    for name in names:
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    return None


def _from_architecture(
    architecture: dict[str, Any], tokenizer: PreTrainedTokenizerBase
) -> PreTrainedModel:
    """Random weights in the shape `architecture` gives; the caller seeds torch first."""
    ids = token_ids(tokenizer)
    if architecture.get("model_type") == "t5":
        # T5 starts decoding from its pad token; that is how its config and generate expect it.
        ids["decoder_start_token_id"] = ids["pad_token_id"]
    return from_architecture(
        architecture, kind="seq2seq", defaults={"vocab_size": len(tokenizer), **ids}
    )


def from_architecture(
    architecture: Mapping[str, Any],
    *,
    kind: ModelKind,
    defaults: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    adjust: Callable[[PretrainedConfig], None] | None = None,
) -> PreTrainedModel:
    """A `kind` model with random weights in the shape `architecture` (`model.architecture`)
    gives; the caller seeds torch first. `defaults` fill what the architecture leaves out (a
    user who pins an id means it), `overrides` win over it, `adjust` edits the config last.
    A failure names model.architecture and its model_type."""
    from transformers import AutoConfig

    settings = dict(architecture)
    model_type = settings.pop("model_type")
    try:
        config = AutoConfig.for_model(model_type, **{**defaults, **settings, **(overrides or {})})
        if adjust is not None:
            adjust(config)
        return _auto_class(kind).from_config(config)
    except (ValueError, KeyError, TypeError) as err:
        raise ModelError(
            f"model.architecture: cannot build a {_KIND_WORDS[kind]} of model_type "
            f"{model_type!r}: {first_line(err)}"
        ) from err


def checkpoint_config(
    key: str, source: str, *, model: ModelConfig, kind: ModelKind
) -> PretrainedConfig:
    """The config of the checkpoint `source` names (hub id, folder, gs://, package:), read
    alone, before its weights; a failure names `key` and where it looked."""
    from transformers import AutoConfig

    path, where = _resolve(key, source)
    try:
        config: PretrainedConfig = AutoConfig.from_pretrained(
            path,
            revision=model.revision if where.startswith("hub") else None,
            trust_remote_code=model.trust_remote_code,
        )
    except Exception as err:
        raise ModelError(_load_failure(key, source, where, err, kind=kind)) from err
    return config


def _auto_class(kind: ModelKind) -> Any:
    import transformers

    return {
        "seq2seq": transformers.AutoModelForSeq2SeqLM,
        "causal_lm": transformers.AutoModelForCausalLM,
        "classifier": transformers.AutoModelForSequenceClassification,
    }[kind]


def pretrained(
    source: str, *, model: ModelConfig, kind: ModelKind = "seq2seq", **options: Any
) -> PreTrainedModel:
    """`kind`'s Auto class from the checkpoint at `source` (`options` go to from_pretrained)."""
    key = "model.warm_start_decoder" if source == model.warm_start_decoder else "model.source"
    path, where = _resolve(key, source)
    _no_conversion_requests()
    try:
        return _auto_class(kind).from_pretrained(
            path,
            revision=model.revision if where.startswith("hub") else None,
            trust_remote_code=model.trust_remote_code,
            **SAFE_WEIGHTS,
            **options,
        )
    except Exception as err:
        raise ModelError(_load_failure(key, source, where, err, kind=kind)) from err


def _warm_started_encoder_decoder(
    encoder: str,
    decoder: str,
    tokenizer: PreTrainedTokenizerBase,
    *,
    tie: bool,
    model: ModelConfig,
) -> PreTrainedModel:
    """Encoder and decoder from two checkpoints; the decoder gains fresh cross-attention."""
    from transformers import EncoderDecoderModel

    encoder_path, encoder_where = _resolve("model.encoder_decoder.encoder", encoder)
    decoder_path, decoder_where = _resolve("model.encoder_decoder.decoder", decoder)
    _no_conversion_requests()
    try:
        built = EncoderDecoderModel.from_encoder_decoder_pretrained(
            encoder_path,
            decoder_path,
            tie_encoder_decoder=tie,
            **{
                f"{side}_{key}": value
                for side in ("encoder", "decoder")
                for key, value in SAFE_WEIGHTS.items()
            },
            encoder_trust_remote_code=model.trust_remote_code,
            decoder_trust_remote_code=model.trust_remote_code,
        )
    except Exception as err:
        raise ModelError(
            "model.encoder_decoder: could not warm-start from "
            f"encoder {encoder!r} ({encoder_where}) and decoder {decoder!r} ({decoder_where}): "
            f"{first_line(err)}"
        ) from err
    ids = token_ids(tokenizer)
    # EncoderDecoderModel's own config carries no token ids; generate and the loss's
    # label shifting read them from here.
    for name, value in ids.items():
        setattr(built.config, name, value)
        setattr(built.generation_config, name, value)
    if model.encoder_decoder is not None and model.encoder_decoder.cross_attention_init != "random":
        _cross_attention_from_self_attention(built.decoder, decoder)
    built.config.vocab_size = built.config.decoder.vocab_size
    if built.config.vocab_size < len(tokenizer):
        raise ModelError(
            f"model.encoder_decoder.decoder {decoder!r} has {built.config.vocab_size} "
            f"token embeddings but the tokenizer has {len(tokenizer)} tokens; use the "
            "decoder's own tokenizer"
        )
    return built


def _cross_attention_from_self_attention(decoder: Any, source: str) -> None:
    """Copy each decoder layer's self-attention weights into its new cross-attention.

    Under ZeRO-3 the weights are partitioned as they load; each pair is gathered, copied on
    every rank (the same values everywhere) and partitioned again.
    """
    import torch
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    pairs = [
        (module.attention, module.crossattention)
        for module in decoder.modules()
        if hasattr(module, "crossattention") and hasattr(module, "attention")
    ]
    if not pairs or any(type(a) is not type(c) for a, c in pairs):
        raise ModelError(
            "model.encoder_decoder.cross_attention_init: 'self_attention' needs a decoder whose "
            f"layers have BERT-style `attention` and `crossattention` blocks; {source!r} has "
            "none; use 'random'"
        )
    for attention, cross in pairs:
        params = [*attention.parameters(), *cross.parameters()]
        if is_deepspeed_zero3_enabled():
            import deepspeed

            gathered: Any = deepspeed.zero.GatheredParameters(params, modifier_rank=0)
        else:
            import contextlib

            gathered = contextlib.nullcontext()
        with gathered, torch.no_grad():
            for mine, theirs in zip(cross.parameters(), attention.parameters(), strict=True):
                mine.copy_(theirs)


def _no_conversion_requests() -> None:
    """Keep transformers from asking the hub's conversion service for a safetensors copy.

    When it loads a hub checkpoint that has only `.bin` weights, transformers starts a thread
    that opens a conversion pull request on the model's hub page; a training job, on every
    node and every restart, must not.
    """
    os.environ.setdefault("DISABLE_SAFETENSORS_CONVERSION", "1")


def _resolve(key: str, source: str) -> tuple[str, str]:
    """`from_pretrained`'s argument for `source`, and what it is in words for messages."""
    try:
        path = resolve_model_path(source)
    except Exception as err:
        raise ModelError(f"{key} {source!r}: {first_line(err)}") from err
    if is_hub_id(source, path):
        return path, f"hub id {path!r}"
    return path, f"folder {path}"


def _load_failure(
    key: str, source: str, where: str, err: BaseException, *, kind: ModelKind = "seq2seq"
) -> str:
    reason = first_line(err)
    hint = ""
    if where.startswith("hub") and ("offline" in reason.lower() or "connect" in reason.lower()):
        hint = (
            "; this machine cannot reach the Hugging Face hub and the model is not cached: "
            "use a local folder, a gs:// folder or `package:<python_package>/<folder>`"
        )
    elif "weights only load failed" in reason.lower():
        # torch's own advice (load with weights_only=False) is the unsafe way; say ours.
        reason = (
            "its pytorch_model.bin holds more than tensors (a pickle that would run code when "
            "loaded), and only plain tensors are read"
        )
        hint = "; save it as safetensors with `model.save_pretrained(folder)` where you trust it"
    return f"{key} {source!r}: could not load a {_KIND_WORDS[kind]} from {where}: {reason}{hint}"
