"""Tiny classifiers of the layouts the fit check counts: BERT's (MiniLM, RoBERTa),
DistilBERT's, and a Llama with a score head, for hand counts and for measuring what autograd
keeps."""

from typing import Any

#: BERT's layout: post-norm attention and GELU feed-forward, dropout 0.1 on both residual
#: branches and on the attention probabilities.
TINY_BERT: dict[str, Any] = {
    "model_type": "bert",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 160,
    "vocab_size": 500,
}
#: DistilBERT's: the same, with one residual dropout per layer (after the feed-forward).
TINY_DISTILBERT: dict[str, Any] = {
    "model_type": "distilbert",
    "dim": 64,
    "n_layers": 2,
    "n_heads": 4,
    "hidden_dim": 160,
    "vocab_size": 500,
}
#: A decoder with a score head: Llama's layout.
TINY_LLAMA_CLASSIFIER: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 500,
    "pad_token_id": 0,
}
