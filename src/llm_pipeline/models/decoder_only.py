"""Causal LMs to fine-tune (`instruction_tuning`): built, and given the token ids they lack.

`loading.load_model` comes here for a causal kind (`ModelKind.causal`). Decoder-only
checkpoints often have no pad token (Llama, Qwen, GPT-2): batches need one, so the EOS pads,
which is harmless because padded positions are masked and carry label -100. An encoder
checkpoint (MiniLM, the one pretrained network a package registry ships) becomes a causal
decoder the way `EncoderDecoderModel` builds its decoder: `is_decoder=True`, no
cross-attention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llm_pipeline.config import ModelConfig
from llm_pipeline.errors import ModelError
from llm_pipeline.models.builders import checkpoint_config, first_id, from_architecture, pretrained
from llm_pipeline.models.sources import ensure_pad_token
from llm_pipeline.tasks.kinds import CAUSAL_LM

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["build_causal_lm", "causal_token_ids", "ensure_pad_token"]


def causal_token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """pad / eos / bos ids a causal LM's config needs, read from the tokenizer.

    BERT-style tokenizers (MiniLM) have no eos or bos: [SEP] ends every response the
    preprocess step makes, so it is the eos, and [CLS] the bos.
    """
    ensure_pad_token(tokenizer)
    ids = {"pad_token_id": int(tokenizer.pad_token_id)}
    eos = first_id(tokenizer, "eos_token_id", "sep_token_id")
    bos = first_id(tokenizer, "bos_token_id", "cls_token_id")
    if eos is not None:
        ids["eos_token_id"] = eos
    if bos is not None:
        ids["bos_token_id"] = bos
    return ids


def build_causal_lm(model: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """The causal LM `model` describes: from an architecture, a checkpoint, or an encoder
    warm-started as one; its special-token ids matching `tokenizer`. Raises ModelError."""
    if model.encoder_decoder is not None:
        raise ModelError(
            "model.encoder_decoder builds a seq2seq model; this task trains a causal LM: use "
            "model.source, model.architecture or model.warm_start_decoder"
        )
    if model.architecture is not None:
        return _causal_from_architecture(model.architecture, tokenizer)
    if model.warm_start_decoder is not None:
        built = _warm_started_decoder(model.warm_start_decoder, model=model)
    else:
        assert model.source is not None  # ModelConfig guarantees exactly one source
        built = pretrained(model.source, model=model, kind=CAUSAL_LM)
    _fill_missing_token_ids(built, tokenizer)
    return built


def _causal_from_architecture(
    architecture: dict[str, Any], tokenizer: PreTrainedTokenizerBase
) -> PreTrainedModel:
    """Random weights in the shape `architecture` gives; the caller seeds torch first."""

    def attend_backwards(config: PretrainedConfig) -> None:
        if "is_decoder" not in architecture and hasattr(config, "is_decoder"):
            config.is_decoder = True  # BERT-style stacks attend only backwards as decoders

    return from_architecture(
        architecture,
        kind=CAUSAL_LM,
        defaults={"vocab_size": len(tokenizer), **causal_token_ids(tokenizer)},
        adjust=attend_backwards,
    )


def _warm_started_decoder(source: str, *, model: ModelConfig) -> PreTrainedModel:
    """An encoder checkpoint loaded as a causal decoder, as EncoderDecoderModel builds its
    decoder: `is_decoder` makes its self-attention causal; no cross-attention is added. What
    the checkpoint lacks (BERT's LM-head transform, when it was saved without it) starts
    random; the output projection is tied to the word embeddings."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = checkpoint_config("model.warm_start_decoder", source, model=model, kind=CAUSAL_LM)
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelError(
            f"model.warm_start_decoder {source!r}: transformers has no causal-LM form of "
            f"model_type {config.model_type!r}; use a BERT-style encoder (bert, roberta, ...)"
        )
    config.is_decoder = True
    config.add_cross_attention = False
    return pretrained(source, model=model, kind=CAUSAL_LM, config=config)


def _fill_missing_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Set the ids a checkpoint's config lacks (a pad id, for most causal LMs; eos and bos
    for a BERT) from the tokenizer: batched generation pads, and stops at the eos."""
    for name, value in causal_token_ids(tokenizer).items():
        for config in (model.config, model.generation_config):
            if getattr(config, name, None) is None:
                setattr(config, name, value)
    vocabulary = int(getattr(model.get_input_embeddings(), "num_embeddings", len(tokenizer)))
    if vocabulary < len(tokenizer):
        raise ModelError(
            f"model {model.config.model_type!r} has {vocabulary} token embeddings but the "
            f"tokenizer has {len(tokenizer)} tokens; use the model's own tokenizer"
        )
