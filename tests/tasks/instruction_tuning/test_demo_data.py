"""The built-in instruction dataset: the docstring pairs asked back as questions, named by
their dotted module, in the same splits as the docstring dataset."""

import textwrap
from pathlib import Path

from llm_pipeline.tasks.instruction_tuning.demo_data import build_instruction_splits
from llm_pipeline.tasks.summarization.demo_data import build_docstring_splits

PROSE = (
    "The queue is shared by every worker of the pool, and a task that fails is put back "
    "at its end so that the other tasks are not held up by it."
)


def _write(path: Path, source: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))


def test_questions_name_the_object_with_its_module_and_answers_are_summary_lines(
    tmp_path: Path,
) -> None:
    _write(
        tmp_path / "pool" / "__init__.py",
        f'''
        """Worker pools that share one queue of tasks.

        {PROSE.replace("queue", "list")}
        """
        ''',
    )
    _write(
        tmp_path / "pool" / "queue.py",
        f'''
        class Queue:
            """A queue of tasks shared by the workers.

            {PROSE}
            """

            def put_back(self):
                """Put a failed task back at the end of the queue.

                {PROSE.replace("pool", "set")}
                """
        ''',
    )
    splits = build_instruction_splits([tmp_path], seed=0, workers=1)
    rows = sorted((row["prompt"], row["response"]) for rows in splits.values() for row in rows)
    assert rows == [
        (
            "What does `pool.queue.Queue.put_back` do?",
            "Put a failed task back at the end of the queue.",
        ),
        ("What does `pool.queue.Queue` do?", "A queue of tasks shared by the workers."),
        ("What does `pool` do?", "Worker pools that share one queue of tasks."),
    ]


def test_the_splits_are_the_docstring_datasets_splits(tmp_path: Path) -> None:
    for i in range(60):
        _write(
            tmp_path / f"m{i:02d}.py",
            f'''
            def f{i}():
                """Handle case number {i} of the set.

                {PROSE.replace("every worker", f"each of the {i + 2} workers")}
                """
            ''',
        )
    asked = build_instruction_splits([tmp_path], seed=5, workers=1)
    summarized = build_docstring_splits([tmp_path], seed=5, workers=1)
    assert asked == build_instruction_splits([tmp_path], seed=5, workers=2)
    for split, rows in summarized.items():
        assert [row["response"] for row in asked[split]] == [row["summary"] for row in rows]
        names = [row["document"].split(":")[0] for row in rows]  # f7 lives in m07.py
        assert [row["prompt"] for row in asked[split]] == [
            f"What does `m{int(name[1:]):02d}.{name}` do?" for name in names
        ]
