"""Build the generating network to fine-tune from a `ModelConfig`: a seq2seq model or a causal
LM.

The task's model kind (`tasks.ModelKind`) picks the `AutoModelFor...` class. The weights come
from a pretrained checkpoint (hub id, folder, `gs://`, `package:`), a random initialisation
from an architecture config plus a named tokenizer, an encoder-decoder warm-started from two
encoder checkpoints (seq2seq), or a causal decoder warm-started from one encoder checkpoint
(causal LM); a classifier is built, for its labels, by its task. Weights load from
safetensors where a checkpoint has them; one that ships only
`pytorch_model.bin` (google/t5-v1_1-xxl does) is read with torch's `weights_only` unpickler,
which takes tensors and plain containers and refuses anything that would run code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llm_pipeline.config import ModelConfig
from llm_pipeline.errors import ModelError, first_line
from llm_pipeline.models.builders import (
    SAFE_WEIGHTS,
    first_id,
    from_architecture,
    no_conversion_requests,
    pretrained,
    resolve_source,
)
from llm_pipeline.models.sources import resolve_model_path
from llm_pipeline.tasks.kinds import SEQ2SEQ, ModelKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def load_model(
    model: ModelConfig,
    tokenizer: PreTrainedTokenizerBase,
    *,
    kind: ModelKind = SEQ2SEQ,
) -> PreTrainedModel:
    """The generating model of `kind` that `model` describes, its special-token ids matching
    `tokenizer`: a seq2seq model, or a causal LM (`decoder_only`). A kind that scores labels
    is built by its task (`Task.build_model`), for the labels it scores.

    Raises ModelError naming the config key, the location tried and why it failed.
    """
    if kind.causal:
        from llm_pipeline.models.decoder_only import build_causal_lm

        return build_causal_lm(model, tokenizer)
    if not kind.encoder_decoder:
        raise ModelError(
            f"a {kind.description} is built by its task, for its labels (Task.build_model)"
        )
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


def _from_architecture(
    architecture: dict[str, Any], tokenizer: PreTrainedTokenizerBase
) -> PreTrainedModel:
    """Random weights in the shape `architecture` gives; the caller seeds torch first."""
    ids = token_ids(tokenizer)
    if architecture.get("model_type") == "t5":
        # T5 starts decoding from its pad token; that is how its config and generate expect it.
        ids["decoder_start_token_id"] = ids["pad_token_id"]
    return from_architecture(
        architecture, kind=SEQ2SEQ, defaults={"vocab_size": len(tokenizer), **ids}
    )


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

    encoder_path, encoder_where = resolve_source("model.encoder_decoder.encoder", encoder)
    decoder_path, decoder_where = resolve_source("model.encoder_decoder.decoder", decoder)
    no_conversion_requests()
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
    # EncoderDecoderModel reads the encoder's last hidden states only: a pooler (BERT's)
    # never gets a gradient, and DDP (the plain Trainer over processes, `train.zero_stage`
    # 0) refuses a trainable parameter that gets none. Frozen, it is saved as loaded.
    pooler = getattr(built.encoder, "pooler", None)
    if pooler is not None:
        pooler.requires_grad_(False)
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
