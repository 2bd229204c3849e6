"""Whether two model folders turn text into the same token ids.

A model can be scored on another run's evaluation rows only if it reads their token ids as
that run's tokenizer meant them: the evaluation feeds the preprocessed ids (and a causal
LM's prompts, rendered with the chat template) straight to the model.
"""

from __future__ import annotations

import os
from typing import Any


def tokenization_difference(
    first: str | os.PathLike[str], second: str | os.PathLike[str]
) -> str | None:
    """What differs between the tokenizers saved in `first` and `second`, or None when
    they tokenize alike: the same vocabulary and pipeline (a fast tokenizer's whole
    definition: normalizer, pre-tokenizer, model, added tokens, post-processor), the same
    special tokens and the same chat template."""
    from transformers import AutoTokenizer

    a: Any = AutoTokenizer.from_pretrained(os.fspath(first))
    b: Any = AutoTokenizer.from_pretrained(os.fspath(second))
    if type(a) is not type(b):
        return f"a {type(a).__name__} against a {type(b).__name__}"
    if a.is_fast and b.is_fast:
        if a.backend_tokenizer.to_str() != b.backend_tokenizer.to_str():
            return "their vocabularies or tokenization rules differ"
    elif a.get_vocab() != b.get_vocab():
        return "their vocabularies differ"
    if a.special_tokens_map != b.special_tokens_map:
        return "their special tokens differ"
    if getattr(a, "chat_template", None) != getattr(b, "chat_template", None):
        return "their chat templates differ"
    return None
