"""The built-in preference dataset: the instruction demo's questions, each with its own summary
line chosen and the summary line of another object of the same module rejected."""

import textwrap
from pathlib import Path

import pytest

from llm_pipeline.config import DataConfig
from llm_pipeline.data import docstrings
from llm_pipeline.data.fingerprint import content_digest
from llm_pipeline.data.sources import load_builtin, load_source
from llm_pipeline.errors import DataError
from llm_pipeline.tasks import builtin_datasets
from llm_pipeline.tasks.instruction_tuning.demo_data import build_instruction_splits
from llm_pipeline.tasks.preference_tuning import demo_data

PROSE = (
    "The value is shared by every caller of the {thing}, and a call that fails is tried "
    "again at its end so that the other calls are not held up by it."
)
#: Documented functions per module of the tree the tests build; `solo` has one.
SIZES = {"alpha.core": 24, "beta.util": 16, "solo": 1}


def _write_module(root: Path, module: str, count: int, first: int = 0) -> None:
    """`module` (dotted) under `root`, holding `count` documented functions numbered from
    `first`, each docstring unique."""
    functions = "".join(
        f'''
        def {module.replace(".", "_")}_{i}():
            """Handle case number {i} of the {module} set.

            {PROSE.format(thing=f"{module} function {i}")}
            """
        '''
        for i in range(first, first + count)
    )
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.parent != root:
        (path.parent / "__init__.py").touch()
    with path.open("a") as file:
        file.write(textwrap.dedent(functions))


def _tree(root: Path) -> Path:
    for module, count in SIZES.items():
        _write_module(root, module, count)
    return root


def _module_of(prompt: str) -> str:
    """`alpha.core` from "What does `alpha.core.alpha_core_3` do?"."""
    return prompt.split("`")[1].rsplit(".", 1)[0]


def test_rows_ask_the_instruction_demos_questions_and_reject_a_sibling_objects_answer(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path)
    splits = demo_data.build_preference_splits([root], seed=0, workers=1)
    instructions = build_instruction_splits([root], seed=0, workers=1)
    assert list(splits) == ["train", "validation", "test"]
    for split, rows in splits.items():
        # The same prompts and answers as the SFT demo's rows, in its splits and order, but
        # for the module with one object, which has no other answer to reject.
        assert [(row["prompt"], row["chosen"]) for row in rows] == [
            (row["prompt"], row["response"])
            for row in instructions[split]
            if _module_of(row["prompt"]) != "solo"
        ]
    rows = [row for rows in splits.values() for row in rows]
    assert len(rows) == SIZES["alpha.core"] + SIZES["beta.util"]
    summaries = {_module_of(row["prompt"]): set() for row in rows}
    for row in rows:
        summaries[_module_of(row["prompt"])].add(row["chosen"])
    for row in rows:
        assert row["rejected"] != row["chosen"]
        assert row["rejected"] in summaries[_module_of(row["prompt"])]
    row = next(row for row in rows if "alpha_core_3`" in row["prompt"])
    assert row["prompt"] == "What does `alpha.core.alpha_core_3` do?"
    assert row["chosen"] == "Handle case number 3 of the alpha.core set."
    # Rejected lines are spread over the module, not one line for every pair.
    assert len({row["rejected"] for row in rows}) > len(rows) // 3


def test_the_pairs_are_the_same_on_every_build_and_new_modules_leave_them_alone(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path / "tree")
    splits = demo_data.build_preference_splits([root], seed=3, workers=1)
    assert splits == demo_data.build_preference_splits([root], seed=3, workers=2)
    reseeded = demo_data.build_preference_splits([root], seed=4, workers=1)
    rejected = {row["prompt"]: row["rejected"] for rows in splits.values() for row in rows}
    assert rejected != {
        row["prompt"]: row["rejected"] for rows in reseeded.values() for row in rows
    }

    _write_module(root, "gamma.more", 6)
    grown = demo_data.build_preference_splits([root], seed=3, workers=1)
    kept = {row["prompt"]: row for rows in grown.values() for row in rows}
    assert len(kept) == len(rejected) + 6
    assert all(kept[row["prompt"]] == row for rows in splits.values() for row in rows)


def test_an_object_added_to_a_module_changes_only_the_pairs_it_now_wins(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before = demo_data.build_preference_splits([root], seed=0, workers=1)
    _write_module(root, "beta.util", 1, first=100)
    after = demo_data.build_preference_splits([root], seed=0, workers=1)
    new = "Handle case number 100 of the beta.util set."
    rows = {row["prompt"]: row for rows in after.values() for row in rows}
    for row in (row for rows in before.values() for row in rows):
        assert rows[row["prompt"]]["rejected"] in (row["rejected"], new)


def test_data_dataset_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _tree(tmp_path)
    monkeypatch.setattr(docstrings, "default_roots", lambda: [root])
    source = load_source(
        DataConfig(dataset=demo_data.NAME),
        tmp_path / "scratch",
        builtins=builtin_datasets(),
    )
    assert source.splits["train"].column_names == ["prompt", "chosen", "rejected"]
    # A function of the installed packages, like the other built-in datasets.
    assert content_digest(demo_data.NAME) == (
        f"builtin:preferences:{docstrings.environment_fingerprint()}"
    )
    with pytest.raises(DataError, match="'builtin:preferences' \\(the same prompts"):
        load_builtin("builtin:pairs", seed=0, builtins=builtin_datasets())
