"""The architecture configs of the hub models the shipped configs name, for offline checks.

The fit check reads a model's shape from its `config.json` alone. A machine that cannot
reach the Hugging Face hub (this project's offline runs, CI) would otherwise have to skip
the check for `configs/*.json`; these are the published `config.json` values of those
models (architecture fields only), used only when the hub cannot be reached. A test keeps
this table in step with the hub ids the shipped configs use.
"""

from typing import Any

_T5_COMMON: dict[str, Any] = {
    "model_type": "t5",
    "architectures": ["T5ForConditionalGeneration"],
    "is_encoder_decoder": True,
    "vocab_size": 32128,
    "d_kv": 64,
    "dropout_rate": 0.1,
    "layer_norm_epsilon": 1e-06,
    "relative_attention_num_buckets": 32,
    "decoder_start_token_id": 0,
    "pad_token_id": 0,
    "eos_token_id": 1,
}

#: https://huggingface.co/google-t5/t5-small/blob/main/config.json
T5_SMALL: dict[str, Any] = {
    **_T5_COMMON,
    "d_model": 512,
    "d_ff": 2048,
    "num_heads": 8,
    "num_layers": 6,
    "feed_forward_proj": "relu",
}

#: https://huggingface.co/google/t5-v1_1-xxl/blob/main/config.json
T5_V1_1_XXL: dict[str, Any] = {
    **_T5_COMMON,
    "d_model": 4096,
    "d_ff": 10240,
    "num_heads": 64,
    "num_layers": 24,
    "num_decoder_layers": 24,
    "feed_forward_proj": "gated-gelu",
    "tie_word_embeddings": False,
}

#: Hub id (as a config may write it) → its config.json values.
KNOWN_MODELS: dict[str, dict[str, Any]] = {
    "google-t5/t5-small": T5_SMALL,
    "t5-small": T5_SMALL,
    "google/t5-v1_1-xxl": T5_V1_1_XXL,
}
