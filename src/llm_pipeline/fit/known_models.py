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

_OPT_COMMON: dict[str, Any] = {
    "model_type": "opt",
    "architectures": ["OPTForCausalLM"],
    "vocab_size": 50272,
    "max_position_embeddings": 2048,
    "do_layer_norm_before": True,
    "activation_function": "relu",
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "layerdrop": 0.0,
    "init_std": 0.02,
    "bos_token_id": 2,
    "eos_token_id": 2,
    "pad_token_id": 1,
    "prefix": "</s>",
}

#: https://huggingface.co/facebook/opt-125m/blob/main/config.json (125,239,296 parameters)
OPT_125M: dict[str, Any] = {
    **_OPT_COMMON,
    "hidden_size": 768,
    "ffn_dim": 3072,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "word_embed_proj_dim": 768,
}

#: https://huggingface.co/facebook/opt-1.3b/blob/main/config.json (1,315,758,080 parameters)
OPT_1_3B: dict[str, Any] = {
    **_OPT_COMMON,
    "hidden_size": 2048,
    "ffn_dim": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 24,
    "word_embed_proj_dim": 2048,
}

#: https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json (6,738,415,616
#: parameters, as Meta's model card gives them)
LLAMA_2_7B: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "num_hidden_layers": 32,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "pretraining_tp": 1,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

#: https://huggingface.co/distilbert/distilbert-base-uncased/blob/main/config.json
#: (66,362,880 parameters without a head)
DISTILBERT_BASE_UNCASED: dict[str, Any] = {
    "model_type": "distilbert",
    "architectures": ["DistilBertForMaskedLM"],
    "vocab_size": 30522,
    "max_position_embeddings": 512,
    "sinusoidal_pos_embds": False,
    "n_layers": 6,
    "n_heads": 12,
    "dim": 768,
    "hidden_dim": 3072,
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "activation": "gelu",
    "initializer_range": 0.02,
    "qa_dropout": 0.1,
    "seq_classif_dropout": 0.2,
    "tie_weights_": True,
    "pad_token_id": 0,
}

#: Hub id (as a config may write it) → its config.json values.
KNOWN_MODELS: dict[str, dict[str, Any]] = {
    "google-t5/t5-small": T5_SMALL,
    "t5-small": T5_SMALL,
    "google/t5-v1_1-xxl": T5_V1_1_XXL,
    "facebook/opt-125m": OPT_125M,
    "facebook/opt-1.3b": OPT_1_3B,
    "meta-llama/Llama-2-7b-hf": LLAMA_2_7B,
    "distilbert-base-uncased": DISTILBERT_BASE_UNCASED,
    "distilbert/distilbert-base-uncased": DISTILBERT_BASE_UNCASED,
}
