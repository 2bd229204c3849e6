"""Instruction tuning: supervised fine-tuning of a decoder-only causal LM on chats
(DeepSpeed-Chat's step 1).

Rows are either a `prompt` and its `response`, or one `messages` column holding a chat:
a list of turns `{"role": "system" | "user" | "assistant", "content": str}` (the layout
most hub SFT sets, OpenAI and Vertex use). The model learns every assistant turn; the
system and user turns before it are its prompt.

Served, an instance is a prompt (a text: one user turn) or `{"messages": [...]}`, rendered
as training rendered chats; the prediction is the model's completion.
"""

from collections.abc import Mapping
from typing import Any, ClassVar

from llm_pipeline.errors import json_type
from llm_pipeline.tasks.base import Chat, Instance, InstanceError, ModelKind, ServingPage, Task


class InstructionTuning(Task):
    """Supervised fine-tuning of a causal LM (OPT, Llama, Qwen, Gemma): loss on the responses
    only."""

    name: ClassVar[str] = "instruction_tuning"

    # data
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (("prompt", "response"), ("messages",))
    target_role: ClassVar[str] = "response"

    def source_texts(self, batch: dict[str, list[Any]], *, prefix: str) -> list[str]:
        return [prefix + str(text) for text in batch["prompt"]]

    # model and training
    model_kind: ClassVar[ModelKind] = "causal_lm"

    # evaluation
    # ROUGE-L (longest common subsequence) rewards an answer for the reference's words in
    # order without asking for sentences; rougeLsum's sentence split means little for a
    # one-line answer.
    metric_names: ClassVar[tuple[str, ...]] = ("rougeL", "exact_match", "perplexity")
    source_column: ClassVar[str] = "prompt"
    reference_column: ClassVar[str] = "response"
    # Greedy search: the answer the model rates most likely, the same on every run. A causal
    # LM's generation config often samples (Llama-2's does) and its default max_length counts
    # the prompt, so both are set here. The un-fine-tuned model is scored beside the tuned one.
    evaluation_defaults: ClassVar[Mapping[str, Any]] = {
        "num_beams": 1,
        "do_sample": False,
        "max_new_tokens": 128,
        "score_base_model": True,
    }
    report_title: ClassVar[str] = "Instruction tuning evaluation"
    source_label: ClassVar[str] = "prompt"
    output_label: ClassVar[str] = "response"

    # serving
    serving_page: ClassVar[ServingPage] = ServingPage(
        layout="chat",
        title="Chat",
        action="Send",
        placeholder="Message (Enter sends, Shift+Enter starts a new line)",
        output="Answer",
        parameters=("max_new_tokens", "temperature", "top_p"),
    )
    serving_parameters: ClassVar[tuple[str, ...]] = (
        "max_new_tokens",
        "temperature",
        "top_p",
        "stop",
    )
    serving_instance_shape: ClassVar[str] = 'a list of prompts (texts) or {"messages": [...]} chats'

    def serving_instance(self, value: Any) -> Instance:
        """A prompt (one user turn) or `{"messages": [turns]}`, checked turn by turn."""
        if isinstance(value, str):
            if not value.strip():
                raise InstanceError("prompt is empty")
            return [{"role": "user", "content": value}]
        if not isinstance(value, dict):
            raise InstanceError(
                f'expected a prompt (string) or {{"messages": [...]}}, got {json_type(value)}'
            )
        extra = sorted(set(value) - {"messages"})
        if extra:
            raise InstanceError(f'unknown key {extra[0]!r}; an instance object holds "messages"')
        if "messages" not in value:
            raise InstanceError('an instance object needs "messages"')
        return check_chat(value["messages"], where=("messages",))

    def serving_prompt(self, instance: Instance, *, tokenizer: Any, prefix: str) -> str:
        """The chat rendered as training rendered it, ending where the answer starts."""
        from jinja2 import TemplateError

        assert not isinstance(instance, str)  # serving_instance made it a chat
        try:
            return render_chat(instance, tokenizer, add_generation_prompt=True)
        except TemplateError as exc:  # the model's own template refuses it (Llama 2's does)
            raise InstanceError(
                f"the model's chat template refuses this chat: {exc}", where=("messages",)
            ) from None


#: The roles a chat turn may have.
CHAT_ROLES = ("system", "user", "assistant")

#: The plain instruction/response layout (a Jinja chat template, as Hugging Face writes
#: them) for tokenizers that bring no template of their own.
PLAIN_CHAT_TEMPLATE = (
    "{% for turn in messages %}"
    "{% if turn['role'] == 'system' %}{{ turn['content'] }}\n\n"
    "{% elif turn['role'] == 'user' %}### Instruction:\n{{ turn['content'] }}\n\n"
    "{% else %}### Response:\n{{ turn['content'] }}\n\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}### Response:\n{% endif %}"
)


def render_chat(chat: Chat, tokenizer: Any, *, add_generation_prompt: bool) -> str:
    """`chat` as text: the tokenizer's own chat template where it has one, else the plain
    layout. With `add_generation_prompt` it ends where the assistant's answer begins."""
    template = None if getattr(tokenizer, "chat_template", None) else PLAIN_CHAT_TEMPLATE
    text = tokenizer.apply_chat_template(
        chat,
        chat_template=template,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
    )
    return str(text)


def check_chat(turns: Any, *, where: tuple[str | int, ...] = ()) -> Chat:
    """`turns` as a chat the model can answer, or InstanceError naming the turn at fault.

    A chat is a non-empty list of `{"role", "content"}` objects with known roles and text in
    every turn, and it ends with the user's turn (the one the model answers).
    """
    if not isinstance(turns, list):
        raise InstanceError(
            f'expected a list of turns {{"role": ..., "content": ...}}, got {json_type(turns)}',
            where,
        )
    if not turns:
        raise InstanceError("empty; a chat needs at least one user turn", where)
    chat: Chat = []
    for index, turn in enumerate(turns):
        at = (*where, index)
        if not isinstance(turn, dict):
            raise InstanceError(
                f'expected a turn {{"role": ..., "content": ...}}, got {json_type(turn)}', at
            )
        extra = sorted(set(turn) - {"role", "content"})
        if extra:
            raise InstanceError(f'unknown key {extra[0]!r}; a turn holds "role" and "content"', at)
        role = turn.get("role")
        if role not in CHAT_ROLES:
            what = "required" if role is None else f"unknown role {role!r}"
            raise InstanceError(f"{what}; expected one of {', '.join(CHAT_ROLES)}", (*at, "role"))
        content = turn.get("content")
        if not isinstance(content, str) or not content.strip():
            what = (
                "required: the turn's text"
                if content is None
                else f"expected text, got {json_type(content)}"
                if not isinstance(content, str)
                else "empty: the turn has no text"
            )
            raise InstanceError(what, (*at, "content"))
        chat.append({"role": role, "content": content})
    if chat[-1]["role"] != "user":
        raise InstanceError(
            f"the last turn is the {chat[-1]['role']}'s; a chat ends with the user's turn, "
            "which the model answers",
            (*where, len(chat) - 1, "role"),
        )
    return chat
