"""Task registry: the config's `task` key picks one of these."""

from llm_pipeline.tasks.base import (
    Chat,
    Instance,
    InstanceError,
    ModelKind,
    ServingPage,
    Task,
    TextPair,
)
from llm_pipeline.tasks.instruction_tuning import InstructionTuning
from llm_pipeline.tasks.summarization import Summarization
from llm_pipeline.tasks.text_classification import TextClassification

#: The task of a config or server that names none.
DEFAULT_TASK = Summarization.name

TASKS: dict[str, type[Task]] = {
    Summarization.name: Summarization,
    InstructionTuning.name: InstructionTuning,
    TextClassification.name: TextClassification,
}


def get_task(name: str) -> Task:
    """The task called `name`; raises KeyError naming the known tasks."""
    try:
        return TASKS[name]()
    except KeyError:
        raise KeyError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") from None


__all__ = [
    "DEFAULT_TASK",
    "TASKS",
    "Chat",
    "Instance",
    "InstanceError",
    "ModelKind",
    "ServingPage",
    "Task",
    "TextPair",
    "get_task",
]
