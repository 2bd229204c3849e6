"""Instruction tuning: supervised fine-tuning of a decoder-only causal LM on chats.

Rows are either a `prompt` and its `response`, or one `messages` column holding a chat:
a list of turns `{"role": "system" | "user" | "assistant", "content": str}` (the layout
most hub SFT sets, OpenAI and Vertex use). The model learns every assistant turn; the
system and user turns before it are its prompt.
"""

from typing import ClassVar

from llm_pipeline.tasks.base import Task


class InstructionTuning(Task):
    """Supervised fine-tuning of a causal LM: loss on the responses only."""

    name: ClassVar[str] = "instruction_tuning"

    # data
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (("prompt", "response"), ("messages",))
    target_role: ClassVar[str] = "response"
