"""A word-level tokenizer built in the test, so that expected ids can be written by hand.

One word, one token (split on whitespace and punctuation); `<s>` opens every sequence the
way Llama's tokenizer does; `</s>` is its end-of-sequence token. `CHATML` is a chat template
in the ChatML layout (Qwen's), written with spaces so that each marker is its own word.
"""

from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

SPECIAL = ["<unk>", "<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
WORDS = [
    "system",
    "user",
    "assistant",
    "be",
    "brief",
    "what",
    "is",
    "two",
    "plus",
    "three",
    "four",
    "six",
    "?",
    ".",
    "#",
    "###",
    "Instruction",
    "Response",
    ":",
    "and",
    "name",
    "a",
    "colour",
    "blue",
]
CHATML = (
    "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
    "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)


def word_tokenizer(folder: Path, *, chat_template: str | None = None) -> Path:
    """Save the tokenizer to `folder` (with `chat_template` as its own, if given)."""
    vocab = {token: i for i, token in enumerate([*SPECIAL, *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocab["<s>"])]
    )
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    wrapped.model_max_length = 256
    if chat_template is not None:
        wrapped.chat_template = chat_template
    wrapped.save_pretrained(folder)
    return folder


def ids(tokenizer: PreTrainedTokenizerBase, words: str) -> list[int]:
    """The ids of space-separated words, looked up one by one (not through the tokenizer's
    pipeline, so a test's expectation does not repeat what it tests)."""
    vocab = tokenizer.get_vocab()
    return [vocab[word] for word in words.split()]


def load(folder: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(folder)
