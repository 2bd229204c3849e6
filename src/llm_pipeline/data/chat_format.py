"""How a run's chats are rendered and how long their sequences may be: the chat template and
`data.max_length` resolved once for every task that tokenizes chats for a causal LM
(instruction tuning's chats, preference tuning's pairs), so both read the same config the
same way and a DPO run continues the format its SFT run learned; and how their
preprocessing reports say what was resolved (`ChatLengths`).
"""

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from llm_pipeline.config import DataConfig
from llm_pipeline.data.preprocess import logger, tokenizer_length
from llm_pipeline.errors import DataError
from llm_pipeline.tasks.chat import (
    DEFAULT_CHAT_TEMPLATE,
    ChatFormat,
    ChatTemplateError,
    resolved_chat_template,
)


def resolve_chat_format(tokenizer: PreTrainedTokenizerBase, data: DataConfig) -> ChatFormat:
    """The format chats are rendered in: the tokenizer's own template, else
    `data.chat_template`, else the plain layout (a configured template beside the
    tokenizer's own is ignored, with a warning). Raises DataError when the tokenizer cannot
    end a response at all."""
    if data.chat_template is not None and chat_template_from(tokenizer, data) == "tokenizer":
        logger.warning(
            "data.chat_template is ignored: the tokenizer has its own chat template, and chats "
            "are rendered as the model was trained to read them"
        )
    try:
        return ChatFormat.for_tokenizer(tokenizer, data.chat_template)
    except ChatTemplateError as exc:
        raise DataError(f"model.tokenizer: {exc}") from None


def chat_template_from(tokenizer: PreTrainedTokenizerBase, data: DataConfig) -> str:
    """Where the template comes from, for the report: `tokenizer`, `config` or `default`."""
    if resolved_chat_template(tokenizer, None) != DEFAULT_CHAT_TEMPLATE:
        return "tokenizer"
    return "config" if data.chat_template is not None else "default"


def chat_max_length(
    data: DataConfig, tokenizer: PreTrainedTokenizerBase, chat_format: ChatFormat
) -> tuple[int, str]:
    """The longest sequence (prompt and answer together) and where that number comes from:
    `data.max_length` (`config`), else the tokenizer's limit (`tokenizer`). Raises DataError
    for a length that leaves no room for a prompt and an answer token."""
    if data.max_length is not None:
        length, where = data.max_length, "config"
    else:
        length, where = tokenizer_length(tokenizer), "tokenizer"
    # Room for the leading special token(s), one prompt token and one response token.
    least = len(chat_format.leading_ids) + 2
    if length < least:
        raise DataError(
            f"data.max_length: {length} leaves no room for a prompt and a response; the "
            f"tokenizer starts every sequence with {len(chat_format.leading_ids)} special "
            f"token(s), so it must be at least {least}"
        )
    return length, where


@dataclass(frozen=True)
class ChatLengths:
    """What a chat task's preprocessing report says first: the resolved sequence length
    and template, and where each came from (its per-split statistics follow)."""

    max_length: int
    #: `config`, or `tokenizer` (its model_max_length, capped at data.preprocess.LENGTH_LIMIT).
    max_length_from: str
    #: `tokenizer` (its own chat template), `config` (data.chat_template) or `default`.
    chat_template_from: str

    def log_lengths(self) -> None:
        """The report's first line: the length and the template, and where each came from."""
        logger.info(
            f"max_length {self.max_length} ({self.max_length_from}), chat template from "
            f"{self.chat_template_from}"
        )
