"""Preference rows become checked, tokenized pairs: what Direct Preference Optimization reads.

A row holds a prompt (`prompt`, a text, or `messages`, a chat ending with the user's turn)
and two answers to it, `chosen` and `rejected`, each a text or an assistant message
(`{"role": "assistant", "content": ...}`, alone or as a one-turn list: TRL's layout). Both
answers are rendered after the prompt with the model's chat template (tasks/chat.py, the
same rules instruction tuning trains with, so DPO continues the chat format SFT taught), and
the prompt is masked from the loss.

DPO compares the two answers' log-probabilities, so each is kept whole: a pair too long for
`max_length` loses its prompt's oldest tokens (after the leading special tokens), never an
answer token; a pair whose longer answer leaves no room for any prompt token is refused.
Refused rows are counted by reason and named by row (counted from 1, as a person reading the
file counts), as instruction tuning reports its bad chats.
"""

import json
from dataclasses import dataclass
from typing import Any

from llm_pipeline.tasks.chat import (
    ChatFormat,
    TemplateError,
    Turn,
    as_chat,
    chat_problem,
    turn_name,
)

#: The label of a token not learned: the one cross-entropy and the log-prob sums skip.
IGNORE_INDEX = -100

#: Why a row is refused, as counted in the report.
UNUSABLE = "unusable"  # a column missing or empty, a bad turn, a template that refuses it
SAME_ANSWERS = "same_answers"  # nothing to prefer
ANSWERS_TOO_LONG = "answers_too_long"  # no prompt token fits beside the longer answer
REASONS = (UNUSABLE, SAME_ANSWERS, ANSWERS_TOO_LONG)


@dataclass(frozen=True)
class Refused:
    """A row that cannot become a pair: why (one of REASONS) and what, for the user."""

    reason: str
    problem: str


@dataclass(frozen=True)
class PreferenceRow:
    """A checked row: the prompt as turns and the two answers' texts."""

    turns: list[Turn]
    chosen: str
    rejected: str


@dataclass(frozen=True)
class Pair:
    """One pair as token ids: the (possibly cut) prompt and each answer, EOS-ended."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    #: Prompt tokens cut to fit `max_length` (0 when the pair fit).
    prompt_dropped: int = 0

    def columns(self) -> dict[str, list[int]]:
        """The training columns: each answer after the prompt, its labels the answer only."""
        out = {"prompt_input_ids": self.prompt_ids}
        masked = [IGNORE_INDEX] * len(self.prompt_ids)
        for name, answer in (("chosen", self.chosen_ids), ("rejected", self.rejected_ids)):
            out[f"{name}_input_ids"] = self.prompt_ids + answer
            out[f"{name}_attention_mask"] = [1] * (len(self.prompt_ids) + len(answer))
            out[f"{name}_labels"] = masked + answer
        return out


def check_row(row: dict[str, Any]) -> PreferenceRow | Refused:
    """The row's prompt and answers, or why it cannot be used (naming the column or turn).

    Answers are compared without surrounding whitespace: two answers that differ only there
    are the same answer, and a preference between them teaches nothing.
    """
    turns = _prompt_turns(row)
    if isinstance(turns, Refused):
        return turns
    chosen = _answer_text("chosen", row.get("chosen"))
    if isinstance(chosen, Refused):
        return chosen
    rejected = _answer_text("rejected", row.get("rejected"))
    if isinstance(rejected, Refused):
        return rejected
    if chosen.strip() == rejected.strip():
        return Refused(SAME_ANSWERS, "chosen and rejected are the same answer")
    return PreferenceRow(turns=turns, chosen=chosen, rejected=rejected)


def _prompt_turns(row: dict[str, Any]) -> list[Turn] | Refused:
    """The prompt as chat turns: `messages` as given, or `prompt` as the user's one turn."""
    if "messages" in row:
        chat = as_chat(row["messages"])
        if chat is None:
            return Refused(UNUSABLE, "messages: missing")
        problem = chat_problem(chat, need_assistant=False)
        if problem is not None:
            return Refused(UNUSABLE, f"messages: {problem}")
        last = len(chat) - 1
        if chat[last]["role"] != "user":
            return Refused(
                UNUSABLE,
                f"messages: {turn_name(last, chat)}: the prompt ends with the "
                f"{chat[last]['role']}'s turn; it must end with the user's, which the answers "
                "answer",
            )
        return [{"role": turn["role"], "content": turn["content"]} for turn in chat]
    prompt = _text("prompt", row.get("prompt"))
    return prompt if isinstance(prompt, Refused) else [{"role": "user", "content": prompt}]


def _answer_text(column: str, value: Any) -> str | Refused:
    """An answer's text: a text, an assistant message, or a list of exactly one (TRL's
    conversational layout; in a CSV cell, JSON text holding one)."""
    message = _as_message(value)
    if message is not None:
        if message["role"] != "assistant":
            return Refused(
                UNUSABLE, f"{column}: a message whose role is not 'assistant' ({message['role']!r})"
            )
        value = message.get("content")
    return _text(column, value)


def _as_message(value: Any) -> dict[str, Any] | None:
    """`value` as one message (an object with a `role`), else None: a text stays a text,
    even one that is JSON (an answer may be code or data)."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        value = as_chat(value)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value if isinstance(value, dict) and "role" in value else None


def _text(column: str, value: Any) -> str | Refused:
    if value is None:
        return Refused(UNUSABLE, f"{column}: missing")
    if not isinstance(value, str):
        return Refused(UNUSABLE, f"{column}: not text (got {type(value).__name__})")
    if not value.strip():
        return Refused(UNUSABLE, f"{column}: no text")
    return value


def encode_pair(chat_format: ChatFormat, row: PreferenceRow, max_length: int) -> Pair | Refused:
    """The row's pair as token ids of at most `max_length` per answer sequence.

    Raises ChatTemplateError when the template cannot tell prompt from answer at all (the
    template's fault, not the row's); a template that refuses this chat refuses the row.
    """
    encoded: list[list[int]] = []
    prompt: list[int] = []
    for answer in (row.chosen, row.rejected):
        try:
            segments = chat_format.segments([*row.turns, {"role": "assistant", "content": answer}])
        except TemplateError as exc:
            return Refused(UNUSABLE, f"the chat template refuses it: {exc}")
        # The last segment is the answer; every earlier one (earlier assistant turns of a
        # multi-turn prompt included) is context here, not learned. The prompt is the same
        # for both answers: segments() checks that the template renders it before either.
        prompt = [token for segment in segments[:-1] for token in segment.ids]
        encoded.append(segments[-1].ids)
    chosen_ids, rejected_ids = encoded
    lead = len(chat_format.leading_ids)
    room = max_length - lead - max(len(chosen_ids), len(rejected_ids))
    if room < 1:
        longest = max(len(chosen_ids), len(rejected_ids))
        return Refused(
            ANSWERS_TOO_LONG,
            f"the longer answer has {longest} tokens, which leaves no room for the prompt "
            f"within data.max_length ({max_length})",
        )
    dropped = max(0, len(prompt) - lead - room)
    return Pair(
        prompt_ids=prompt[:lead] + prompt[lead + dropped :],
        chosen_ids=chosen_ids,
        rejected_ids=rejected_ids,
        prompt_dropped=dropped,
    )


def prompt_texts(chat_format: ChatFormat, row: PreferenceRow) -> dict[str, str]:
    """The text columns evaluation and serving read: the rendered prompt a model continues,
    the prompt's turns as JSON (what a served request carries), and both answers."""
    return {
        "prompt": chat_format.prompt_text(row.turns),
        "chat": json.dumps(row.turns, ensure_ascii=False),
        "chosen": row.chosen,
        "rejected": row.rejected,
    }


__all__ = [
    "ANSWERS_TOO_LONG",
    "IGNORE_INDEX",
    "REASONS",
    "SAME_ANSWERS",
    "UNUSABLE",
    "Pair",
    "PreferenceRow",
    "Refused",
    "check_row",
    "encode_pair",
    "prompt_texts",
]
