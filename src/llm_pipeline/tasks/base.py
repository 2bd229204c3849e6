"""The seam between the generic pipeline and what is specific to one task.

A task says which columns it needs and how a row becomes model inputs; later it also
scores predictions and shapes serving requests. Adding a task is a sibling module plus one
line in `llm_pipeline.tasks.TASKS`, not a flag threaded through every step.
"""

from abc import ABC
from collections.abc import Iterable
from typing import Any, ClassVar, Literal


class Task(ABC):
    """What one task (summarization, instruction tuning, ...) contributes to the pipeline."""

    name: ClassVar[str]

    # model and training
    #: `seq2seq` (an encoder reads the source, a decoder writes the target) or `causal_lm`
    #: (one decoder-only sequence: prompt, then response).
    model_kind: ClassVar[Literal["seq2seq", "causal_lm"]]

    # data
    #: The accepted sets of roles: `data.columns` maps exactly one of them to source
    #: columns, and the download step names the columns by role.
    role_sets: ClassVar[tuple[tuple[str, ...], ...]]
    #: The role the model learns to produce (its length decides max_target_length).
    target_role: ClassVar[str]
    #: The `data.*` settings only this task reads; another task's, set to anything but its
    #: default, is refused by the config rather than silently ignored.
    data_keys: ClassVar[frozenset[str]]

    # serving
    #: The generation parameters a prediction request may set, in the order messages list
    #: them (fields of `serve.schemas.GenerationParameters`).
    serving_parameters: ClassVar[tuple[str, ...]]

    def role_set(self, columns: Iterable[str]) -> tuple[str, ...] | None:
        """The role set that `columns` (the roles a config maps) is exactly; None if none."""
        given = set(columns)
        return next((roles for roles in self.role_sets if set(roles) == given), None)

    def role_set_among(self, columns: Iterable[str]) -> tuple[str, ...] | None:
        """The first role set whose roles are all among `columns` (a dataset's); None if none."""
        given = set(columns)
        return next((roles for roles in self.role_sets if set(roles) <= given), None)

    def describe_role_sets(self) -> str:
        """The accepted role sets in words, for messages: `['prompt', 'response'] or ...`."""
        return " or ".join(str(sorted(roles)) for roles in self.role_sets)

    def source_texts(self, batch: dict[str, list[Any]], *, prefix: str) -> list[str]:
        """The model's input text for each row of a batch (seq2seq tasks)."""
        raise NotImplementedError(f"task {self.name!r} has no separate source text")

    def target_texts(self, batch: dict[str, list[Any]]) -> list[str]:
        """The text the model should produce for each row of a batch."""
        return [str(text) for text in batch[self.target_role]]

    def chats(self, batch: dict[str, list[Any]]) -> list[Any]:
        """Each row of a batch as a chat (causal-LM tasks); check them with `chat_problems`."""
        raise NotImplementedError(f"task {self.name!r} reads no chats")

    def chat_problems(self, batch: dict[str, list[Any]]) -> list[str | None]:
        """What makes each row of a batch unusable for training, naming the column or turn;
        None for a usable row (causal-LM tasks)."""
        raise NotImplementedError(f"task {self.name!r} reads no chats")
