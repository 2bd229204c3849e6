"""Instruction tuning: supervised fine-tuning of a decoder-only causal LM on chats.

Rows are either a `prompt` and its `response`, or one `messages` column holding a chat:
a list of turns `{"role": "system" | "user" | "assistant", "content": str}` (the layout
most hub SFT sets, OpenAI and Vertex use). The model learns every assistant turn; the
system and user turns before it are its prompt. A prompt/response row is the one-turn chat
`[user: prompt, assistant: response]`, so both layouts take the same path (tasks/chat.py).
"""

from typing import Any, ClassVar, Literal

from llm_pipeline.tasks.base import Task
from llm_pipeline.tasks.chat import as_chat, chat_problem


class InstructionTuning(Task):
    """Supervised fine-tuning of a causal LM: loss on the responses only."""

    name: ClassVar[str] = "instruction_tuning"

    # model and training
    model_kind: ClassVar[Literal["seq2seq", "causal_lm"]] = "causal_lm"

    # data
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (("prompt", "response"), ("messages",))
    target_role: ClassVar[str] = "response"
    data_keys: ClassVar[frozenset[str]] = frozenset({"max_length", "packing", "chat_template"})

    # serving
    serving_parameters: ClassVar[tuple[str, ...]] = (
        "max_new_tokens",
        "temperature",
        "top_p",
        "stop",
    )

    def chats(self, batch: dict[str, list[Any]]) -> list[Any]:
        """Each row of a batch as a chat, as stored (check it with `chat_problem`)."""
        if "messages" in batch:
            return [as_chat(chat) for chat in batch["messages"]]
        return [
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
            for prompt, response in zip(batch["prompt"], batch["response"], strict=True)
        ]

    def chat_problems(self, batch: dict[str, list[Any]]) -> list[str | None]:
        """What makes each row unusable for training, naming the column or the turn."""
        if "messages" in batch:
            return [chat_problem(chat, need_assistant=True) for chat in self.chats(batch)]
        return [
            _text_problem("prompt", prompt) or _text_problem("response", response)
            for prompt, response in zip(batch["prompt"], batch["response"], strict=True)
        ]


def _text_problem(column: str, text: Any) -> str | None:
    if not isinstance(text, str):
        return f"{column}: not text (got {type(text).__name__})"
    if not text.strip():
        return f"{column}: no text"
    return None
