"""Task registry: the config's `task` key picks one of these.

A task is one package under `tasks/` (its `TASK` is the `Task` subclass). The registry
imports a task's package the first time a layer asks for it, by the dotted name below: the
layers (data, train, evaluation, serve, fit) sit below the task packages that call them, so
none of them imports a task by name, and a config check does not import every task's model
and scoring code. Adding a task is adding its package and one line here.

docs/architecture.md ("## Tasks") says what a task package holds and which hooks the layers
call; tests/test_task_seam.py holds every module outside `tasks/` to asking the task rather
than comparing its name. A lookup here imports the task's package: a module that looks a task
up while it is itself being imported makes every task package part of its import
(tests/test_import_cycles.py counts it so).
"""

import importlib
from collections.abc import Iterator, Mapping

from llm_pipeline.tasks.base import (
    BuiltinDataset,
    Chat,
    Instance,
    InstanceError,
    ServingPage,
    Task,
    TextPair,
)
from llm_pipeline.tasks.kinds import MODEL_KINDS, ModelKind

#: Each task's package, by the name configs use. The first is the default.
TASK_PACKAGES: dict[str, str] = {
    "summarization": "llm_pipeline.tasks.summarization",
    "instruction_tuning": "llm_pipeline.tasks.instruction_tuning",
    "text_classification": "llm_pipeline.tasks.text_classification",
    "preference_tuning": "llm_pipeline.tasks.preference_tuning",
}

#: The task of a config or server that names none.
DEFAULT_TASK = next(iter(TASK_PACKAGES))


class _TaskRegistry(Mapping[str, type[Task]]):
    """Task classes by name, each package imported on first use."""

    def __getitem__(self, name: str) -> type[Task]:
        package = TASK_PACKAGES[name]  # KeyError for an unknown name, as a dict gives
        task: type[Task] = importlib.import_module(package).TASK
        return task

    def __iter__(self) -> Iterator[str]:
        return iter(TASK_PACKAGES)

    def __len__(self) -> int:
        return len(TASK_PACKAGES)


#: Every task class by its name.
TASKS: Mapping[str, type[Task]] = _TaskRegistry()


def get_task(name: str) -> Task:
    """The task called `name`; raises KeyError naming the known tasks."""
    if name not in TASK_PACKAGES:
        raise KeyError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]()


def builtin_datasets() -> dict[str, BuiltinDataset]:
    """Every task's built-in datasets by name, in the tasks' order: any task may read any of
    them (`data.columns` mapping its roles onto their columns). Imports every task."""
    found: dict[str, BuiltinDataset] = {}
    for name in TASK_PACKAGES:
        for dataset, builtin in get_task(name).builtin_datasets().items():
            if dataset in found:
                raise ValueError(f"task {name!r} brings {dataset!r}, which another task has")
            found[dataset] = builtin
    return found


__all__ = [
    "DEFAULT_TASK",
    "MODEL_KINDS",
    "TASKS",
    "TASK_PACKAGES",
    "BuiltinDataset",
    "Chat",
    "Instance",
    "InstanceError",
    "ModelKind",
    "ServingPage",
    "Task",
    "TextPair",
    "builtin_datasets",
    "get_task",
]
