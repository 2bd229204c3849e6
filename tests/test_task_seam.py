"""The graph, the components, the steps and the CLI never name a task (DESIGN.md "## Tasks").

What is specific to a task lives in its module under `tasks/`; the layers that wire the
pipeline together pass the config's task name on and ask the task object. A module there
that names a task, its class, a model kind or a task's metric has grown a branch that
the next task would have to copy. Source text is read as written, docstrings and comments
included: a docstring that says "summaries" misleads the reader of another task's run.
"""

import re
from pathlib import Path

import pytest

from llm_pipeline.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "llm_pipeline"
#: Where no task may be named: the graph, the components, the steps and the command line.
TASK_FREE = [
    *sorted((PACKAGE / "pipelines").glob("*.py")),
    *sorted((PACKAGE / "components").glob("*.py")),
    *sorted((PACKAGE / "steps").glob("*.py")),
    *sorted((PACKAGE / "cli").glob("*.py")),
    ROOT / "pipeline.py",
]


def task_words() -> dict[str, re.Pattern[str]]:
    """Each word that names something of one task, with the pattern that finds it."""
    words: dict[str, re.Pattern[str]] = {}
    for name, task in TASKS.items():
        for word in {name, name.replace("_", " "), name.replace("_", "-"), task.__name__}:
            words[word] = re.compile(rf"\b{re.escape(word)}\b", re.IGNORECASE)
        words[task.model_kind] = re.compile(rf"\b{re.escape(task.model_kind)}\b", re.IGNORECASE)
        for metric in task.metric_names:
            words[metric] = re.compile(rf"\b{re.escape(metric)}\b")
    return words


def test_the_words_cover_every_task() -> None:
    words = task_words()
    assert {"summarization", "instruction_tuning", "instruction tuning"} <= set(words)
    assert {"seq2seq", "causal_lm", "rougeLsum", "exact_match"} <= set(words)


@pytest.mark.parametrize("path", TASK_FREE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_task_is_named(path: Path) -> None:
    words = task_words()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {word!r} in {line.strip()!r}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for word, pattern in words.items()
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)
