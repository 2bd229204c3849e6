"""The built-in datasets: each task brings its demo's, and the download step offers every
task's to every task (a dataset is read by name, whichever task it was made for)."""

import textwrap
from pathlib import Path

import datasets
import pytest

from llm_pipeline.config import DataConfig
from llm_pipeline.data import docstrings
from llm_pipeline.data.download import download_dataset
from llm_pipeline.tasks import TASKS, builtin_datasets, get_task

PROSE = (
    "The queue is shared by every worker of the pool, and a task that fails is put back "
    "at its end so that the other tasks are not held up by it."
)


def test_each_task_brings_its_demos_dataset_and_every_one_is_offered() -> None:
    owners = {name: task for task in TASKS for name in get_task(task).builtin_datasets()}
    assert owners == {
        "builtin:docstrings": "summarization",
        "builtin:instructions": "instruction_tuning",
        "builtin:docstring_packages": "text_classification",
        "builtin:preferences": "preference_tuning",
    }
    assert list(builtin_datasets()) == list(owners)


def test_a_task_reads_another_tasks_dataset_through_its_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(40):
        (tmp_path / "code").mkdir(exist_ok=True)
        (tmp_path / "code" / f"m{i:02d}.py").write_text(
            textwrap.dedent(
                f'''
                def f{i}():
                    """Handle case number {i} of the set.

                    {PROSE.replace("every worker", f"each of the {i + 2} workers")}
                    """
                '''
            )
        )
    monkeypatch.setattr(docstrings, "default_roots", lambda: [tmp_path / "code"])
    config = DataConfig(
        dataset="builtin:docstrings", columns={"prompt": "document", "response": "summary"}
    )
    download_dataset(
        config, get_task("instruction_tuning"), tmp_path / "out", builtins=builtin_datasets()
    )
    saved = datasets.load_from_disk(str(tmp_path / "out"))
    row = saved["train"][0]
    assert list(row) == ["prompt", "response"]
    assert row["prompt"].startswith("f") and ": The queue is shared by " in row["prompt"]
    assert row["response"].startswith("Handle case number ")
