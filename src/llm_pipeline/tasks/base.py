"""The seam between the generic pipeline and what is specific to one task.

A task says which columns it needs and how a row becomes model inputs; later it also
scores predictions and shapes serving requests. Adding a task is a sibling module plus one
line in `llm_pipeline.tasks.TASKS`, not a flag threaded through every step.
"""

from abc import ABC, abstractmethod
from typing import Any, ClassVar


class Task(ABC):
    """What one task (summarization, ...) contributes to the shared pipeline."""

    name: ClassVar[str]
    #: Columns every example must have, by role; the config maps roles to source columns.
    roles: ClassVar[tuple[str, ...]]
    #: The role the model learns to produce (its length decides max_target_length).
    target_role: ClassVar[str]

    @abstractmethod
    def source_texts(self, batch: dict[str, list[Any]], *, prefix: str) -> list[str]:
        """The model's input text for each row of a batch."""

    def target_texts(self, batch: dict[str, list[Any]]) -> list[str]:
        """The text the model should produce for each row of a batch."""
        return [str(text) for text in batch[self.target_role]]
