"""Chats: what a well-formed one is, and how one becomes text and tokens for a causal LM.

A chat is a list of turns `{"role": "system" | "user" | "assistant", "content": str}`, the
layout of most hub SFT sets, OpenAI and Vertex. The data, evaluation and serving layers all
read chats, so the rules live here, in the lowest layer, once:

- `chat_problem` says what is wrong with a chat (or None), naming the turn;
- `ChatFormat` renders a chat with a Jinja chat template (the tokenizer's own, else the
  configured one) through `tokenizer.apply_chat_template`, and cuts it into token segments
  that are either prompt (system and user turns, the template's headers) or response
  (an assistant turn and its end-of-turn tokens), which is what masks the prompt from the
  loss. Every response ends with the end-of-sequence token;
- `chat_instance` and `chat_prompter` are how a server of chat completions (every task whose
  model is a chat model) checks a request's instance and renders it, by the same rules;
  `ChatTask` is the `Task` hooks that call them, written once for every chat task.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from jinja2 import TemplateError

from llm_pipeline.errors import json_type
from llm_pipeline.tasks.base import (
    Chat,
    Instance,
    InstanceError,
    ServingPage,
    Task,
    source_text,
)

if TYPE_CHECKING:
    # Annotations only: the tokenizer comes from the caller, and a task lookup (a CLI
    # command listing the tasks' metrics) then starts without transformers.
    from transformers import PreTrainedTokenizerBase

#: How every chat task is served: the chat page, the generation parameters a request may
#: set, and what an instance may be (instruction tuning and preference tuning alike).
CHAT_PAGE = ServingPage(
    title="Chat",
    action="Send",
    placeholder="Message (Enter sends, Shift+Enter starts a new line)",
    output="Answer",
    parameters=("max_new_tokens", "temperature", "top_p"),
)
CHAT_PARAMETERS: tuple[str, ...] = ("max_new_tokens", "temperature", "top_p", "stop", "stream")
CHAT_INSTANCE_SHAPE = 'a list of prompts (texts) or {"messages": [...]} chats'

#: The roles a turn may have.
ROLES = ("system", "user", "assistant")
#: One turn; a chat is a list of them.
Turn = dict[str, str]

#: The plain instruction/response layout, used when neither the tokenizer nor the config
#: brings a template: `### Instruction:\n{prompt}\n\n### Response:\n{response}<eos>`.
#: The end-of-sequence text comes in as `eos_token` (`[SEP]` for a tokenizer without one).
DEFAULT_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if not loop.first -%}{{ '\\n\\n' }}{%- endif -%}"
    "{%- if message['role'] == 'system' -%}{{ message['content'] }}"
    "{%- elif message['role'] == 'user' -%}{{ '### Instruction:\\n' + message['content'] }}"
    "{%- else -%}{{ '### Response:\\n' + message['content'] + eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '\\n\\n### Response:\\n' }}{%- endif -%}"
)


class ChatTemplateError(ValueError):
    """The template cannot be used for loss masking at all (not one chat's fault)."""


def as_chat(value: Any) -> Any:
    """A chat as stored: a list, or JSON text holding one (a CSV cell); else `value` as is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def chat_problem(chat: Any, *, need_assistant: bool) -> str | None:
    """What makes `chat` unusable, naming the turn as a person counts it (`turn 2 of 3`,
    `turn_name`); None when it is fine.

    `need_assistant`: training needs an assistant turn to learn; a chat sent for a
    completion does not.
    """
    if not isinstance(chat, list | tuple):
        return f"not a list of turns (got {type(chat).__name__})"
    if not chat:
        return "no turns"
    seen_prompt = False
    for index, turn in enumerate(chat):
        where = turn_name(index, chat)
        if not isinstance(turn, dict) or "role" not in turn or "content" not in turn:
            return f"{where}: not an object with `role` and `content`"
        role, content = turn["role"], turn["content"]
        if role not in ROLES:
            return f"{where}: unknown role {role!r} (roles: {', '.join(ROLES)})"
        if not isinstance(content, str):
            return f"{where}: content is not text (got {type(content).__name__})"
        if not content.strip():
            return f"{where}: no text"
        if role == "assistant" and not seen_prompt:
            return f"{where}: an assistant turn with no system or user turn before it"
        seen_prompt = True
    if need_assistant and not any(turn["role"] == "assistant" for turn in chat):
        return "no assistant turn to learn"
    return None


def turn_name(index: int, chat: Sequence[Any]) -> str:
    """`turn 2 of 3` for `chat[1]`: counted from 1, as a person reading the chat counts."""
    return f"turn {index + 1} of {len(chat)}"


def last_assistant(turns: Sequence[Turn]) -> int:
    """The index of the chat's last assistant turn (the one evaluation asks for)."""
    return max(i for i, turn in enumerate(turns) if turn["role"] == "assistant")


def special_tokens_around(
    tokenizer: PreTrainedTokenizerBase, *, target: bool = False
) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text by default.

    BERT: `[CLS]` and `[SEP]`; T5: none and `</s>`; Llama: `<s>` and none; GPT-2: none.
    Found by encoding a probe with and without special tokens, so any post-processor works.
    """
    key = "text_target" if target else "text"
    with_special = list(tokenizer(**{key: "hello world"}, add_special_tokens=True)["input_ids"])
    bare = list(tokenizer(**{key: "hello world"}, add_special_tokens=False)["input_ids"])
    for start in range(len(with_special) - len(bare) + 1):
        if with_special[start : start + len(bare)] == bare:
            return with_special[:start], with_special[start + len(bare) :]
    raise ChatTemplateError(
        f"cannot tell where {type(tokenizer).__name__} puts its special tokens: "
        f"{with_special} does not contain {bare}"
    )


def resolved_chat_template(tokenizer: PreTrainedTokenizerBase, configured: str | None) -> str:
    """The template chats are rendered with: the tokenizer's own when it has one, else the
    configured one, else the plain instruction/response layout."""
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, dict):  # several named templates: the one for plain chats
        own = own.get("default")
    if isinstance(own, str) and own:
        return own
    return configured or DEFAULT_CHAT_TEMPLATE


@dataclass(frozen=True)
class Segment:
    """A run of tokens that is all prompt (`learned` False) or all response (True)."""

    ids: list[int]
    learned: bool


@dataclass(frozen=True)
class ChatFormat:
    """How chats become text and tokens for one tokenizer and template."""

    tokenizer: PreTrainedTokenizerBase
    template: str
    #: The end-of-sequence token every response ends with: the tokenizer's EOS, else its
    #: separator (`[SEP]` for BERT's tokenizer).
    eos_id: int
    eos_text: str
    #: What the tokenizer puts before a text (`<s>`, `[CLS]`): the start of every sequence.
    leading_ids: tuple[int, ...]

    @classmethod
    def for_tokenizer(
        cls, tokenizer: PreTrainedTokenizerBase, configured_template: str | None = None
    ) -> ChatFormat:
        for name in ("eos_token", "sep_token"):
            text, token_id = getattr(tokenizer, name, None), getattr(tokenizer, f"{name}_id", None)
            if isinstance(text, str) and isinstance(token_id, int):
                break
        else:
            raise ChatTemplateError(
                f"{type(tokenizer).__name__} has neither an end-of-sequence nor a separator "
                "token to end responses with; use a tokenizer that has one"
            )
        leading, _ = special_tokens_around(tokenizer)
        return cls(
            tokenizer=tokenizer,
            template=resolved_chat_template(tokenizer, configured_template),
            eos_id=token_id,
            eos_text=text,
            leading_ids=tuple(leading),
        )

    def render(self, turns: Sequence[Turn], *, generation_prompt: bool) -> str:
        """The chat as text; with `generation_prompt`, ready for the assistant's answer.

        Raises jinja2.TemplateError when the template refuses the chat (Llama-2's, say,
        wants user and assistant turns to alternate).
        """
        text = self.tokenizer.apply_chat_template(
            [dict(turn) for turn in turns],
            chat_template=self.template,
            tokenize=False,
            add_generation_prompt=generation_prompt,
            eos_token=self.eos_text,
        )
        assert isinstance(text, str)  # tokenize=False renders one chat to one string
        return text

    def prompt_text(self, turns: Sequence[Turn]) -> str:
        """What the model continues to answer the chat's last assistant turn (or, for a chat
        with no assistant turn yet, the whole chat): rendered with the generation prompt."""
        if any(turn["role"] == "assistant" for turn in turns):
            turns = turns[: last_assistant(turns)]
        return self.render(turns, generation_prompt=True)

    def prompt_ids(self, text: str) -> list[int]:
        """The token ids of a rendered prompt, as training saw them: the tokenizer's leading
        special tokens (unless the template wrote them), then the text without any others."""
        return self._with_leading(self._ids(text))

    def segments(self, turns: Sequence[Turn]) -> list[Segment]:
        """The chat as alternating prompt and response segments, up to its last assistant turn.

        Each assistant turn's response is what the template adds for it after the generation
        prompt, ending with EOS (appended when the template's turn end is not EOS). Turns
        after the last assistant turn teach nothing and are left out. Raises
        jinja2.TemplateError when the template refuses the chat, ChatTemplateError when the
        template renders an earlier turn differently once later turns follow (then no token
        can be said to belong to one turn).
        """
        segments: list[Segment] = []
        done = ""
        for index, turn in enumerate(turns):
            if turn["role"] != "assistant":
                continue
            asked = self.render(turns[:index], generation_prompt=True)
            answered = self.render(turns[: index + 1], generation_prompt=False)
            if not asked.startswith(done) or not answered.startswith(asked):
                raise ChatTemplateError(
                    f"the chat template renders {turn_name(index, turns)} differently once "
                    "the turns after it follow, so prompt and response tokens cannot be told "
                    "apart; use a template whose rendering of a chat starts with its rendering "
                    "of each shorter chat (data.chat_template, for a tokenizer without its own)"
                )
            prompt = self._ids(asked[len(done) :])
            response = self._ids(answered[len(asked) :])
            if self.eos_id not in response:
                response.append(self.eos_id)
            if not segments:
                prompt = self._with_leading(prompt)
            segments += [Segment(prompt, learned=False), Segment(response, learned=True)]
            done = answered
        return segments

    def _ids(self, text: str) -> list[int]:
        # verbose=False: a long chat is expected here; its cut comes later.
        encoded = self.tokenizer(text, add_special_tokens=False, verbose=False)
        return list(encoded["input_ids"])

    def _with_leading(self, ids: list[int]) -> list[int]:
        lead = list(self.leading_ids)
        return ids if ids[: len(lead)] == lead else lead + ids


def chat_instance(value: Any) -> Chat:
    """A served instance as a chat: a prompt (one user turn) or `{"messages": [turns]}`, a
    chat training would take, ending with the user's turn that the model answers.

    Raises InstanceError saying where in the instance the problem is.
    """
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
    chat = value["messages"]
    problem = chat_problem(chat, need_assistant=False)
    if problem is not None:
        raise InstanceError(problem, ("messages",))
    last = len(chat) - 1
    if chat[last]["role"] != "user":
        raise InstanceError(
            f"{turn_name(last, chat)}: the chat ends with the {chat[last]['role']}'s "
            "turn; it must end with the user's, which the model answers",
            ("messages",),
        )
    return [{"role": turn["role"], "content": turn["content"]} for turn in chat]


def chat_example(value: str) -> dict[str, Any]:
    """The instance a client sends for a preprocessed row's `chat` column (the prompt's
    turns as JSON): `{"messages": turns}`, what the deploy step probes a chat server with."""
    return {"messages": json.loads(value)}


def chat_prompter(
    tokenizer: PreTrainedTokenizerBase, chat_template: str | None
) -> Callable[[Instance], str]:
    """How a server renders a checked chat (`chat_instance`) as training rendered it (the
    tokenizer's chat template, else `chat_template`, else the plain layout), ending where the
    answer starts. The function raises InstanceError for a chat the template refuses; making
    it raises ChatTemplateError for a tokenizer that cannot end an answer."""
    chat_format = ChatFormat.for_tokenizer(tokenizer, chat_template)

    def prompt(instance: Instance) -> str:
        assert isinstance(instance, list)  # chat_instance made it a chat
        try:
            return chat_format.render(instance, generation_prompt=True)
        except TemplateError as exc:  # the template refuses the chat (Llama 2's may)
            raise InstanceError(
                f"the model's chat template refuses this chat: {exc}", ("messages",)
            ) from None

    return prompt


def _turns_text(turns: Any) -> str:
    """Turns (or whatever a malformed row holds) as one text, keys in a fixed order."""
    return json.dumps(turns, ensure_ascii=False, sort_keys=True, default=str)


class ChatTask(Task):
    """What every task whose model is a chat model shares: it is judged by greedy
    completions, its report calls the input a prompt and the output a response, and its
    server takes, probes and renders chats by these rules. Loading the server's model and
    drawing its page (`serving_model`, `serving_widget`) live in the layers above, so each
    task writes those itself."""

    # The turns before the answer (preprocess's `chat`, JSON): the rendered prompt is not
    # what a client sends, and a server renders what it is sent.
    serving_column: ClassVar[str] = "chat"
    # Greedy search: the answer the model rates most likely, the same on every run. A causal
    # LM's generation config often samples (Llama-2's does) and its default max_length counts
    # the prompt, so both are set here. The model training started from is scored beside the
    # tuned one.
    evaluation_defaults: ClassVar[Mapping[str, Any]] = {
        "num_beams": 1,
        "do_sample": False,
        "max_new_tokens": 128,
        "score_base_model": True,
    }

    source_label: ClassVar[str] = "prompt"
    prediction_label: ClassVar[str] = "response"
    output_label: ClassVar[str] = "response"

    serving_page: ClassVar[ServingPage] = CHAT_PAGE
    serving_parameters: ClassVar[tuple[str, ...]] = CHAT_PARAMETERS
    serving_instance_shape: ClassVar[str] = CHAT_INSTANCE_SHAPE

    def source_texts(self, batch: Mapping[str, Sequence[Any]]) -> list[str | None]:
        """The turns the model answers, as JSON: a `prompt` is the one user turn, so the
        same question reads the same in either layout; a chat as `prompt_turns` cuts it."""
        if "messages" not in batch:
            prompts = [source_text(value) for value in batch["prompt"]]
            return [
                None if p is None else _turns_text([{"role": "user", "content": p}])
                for p in prompts
            ]
        return [
            None if chat is None else _turns_text(self.prompt_turns(chat))
            for chat in map(as_chat, batch["messages"])
        ]

    def prompt_turns(self, chat: Any) -> Any:
        """The turns of a `messages` chat that the model reads: here, all of them."""
        return chat

    def serving_example(self, value: str) -> Any:
        """The deploy step's probe from a held-out row's `chat` (its prompt's turns)."""
        return chat_example(value)

    def serving_instance(self, value: Any) -> Instance:
        """A prompt (one user turn) or `{"messages": [turns]}`: a chat training would take,
        ending with the user's turn that the model answers (`chat_instance`)."""
        return chat_instance(value)

    def serving_prompter(
        self, tokenizer: Any, *, prefix: str, chat_template: str | None
    ) -> Callable[[Instance], str]:
        """Chats rendered as training rendered them (the tokenizer's chat template, else
        `chat_template`, else the plain layout), ending where the answer starts."""
        return chat_prompter(tokenizer, chat_template)


__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "ROLES",
    "ChatFormat",
    "ChatTask",
    "ChatTemplateError",
    "Segment",
    "TemplateError",
    "Turn",
    "as_chat",
    "chat_example",
    "chat_instance",
    "chat_problem",
    "chat_prompter",
    "last_assistant",
    "resolved_chat_template",
    "special_tokens_around",
    "turn_name",
]
