"""Tiny causal LMs of both layer layouts the fit check counts (Llama's and OPT's), for hand
counts and for measuring what autograd keeps."""

from typing import Any

from transformers import AutoConfig, PretrainedConfig

#: Llama's layout: RMS norms, rotary attention, a gated SiLU feed-forward, no dropout.
TINY_LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 500,
    "tie_word_embeddings": False,
}
#: OPT's layout: LayerNorms, attention, a ReLU feed-forward, dropout 0.1 on both branches.
TINY_OPT: dict[str, Any] = {
    "model_type": "opt",
    "hidden_size": 64,
    "ffn_dim": 160,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 500,
    "word_embed_proj_dim": 64,
    "max_position_embeddings": 128,
    "dropout": 0.1,
}


def config_of(settings: dict[str, Any], **changes: Any) -> PretrainedConfig:
    """A transformers config from an architecture dict (with `model_type`)."""
    values = {**settings, **changes}
    return AutoConfig.for_model(values.pop("model_type"), **values)
