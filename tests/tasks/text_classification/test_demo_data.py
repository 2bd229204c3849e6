"""The built-in classification dataset: docstrings labelled with the package they come from,
the largest packages only, the name of the documented object never in the text."""

import textwrap
from pathlib import Path

import pytest

from llm_pipeline.config import DataConfig
from llm_pipeline.data import docstrings
from llm_pipeline.data.sources import load_builtin, load_source
from llm_pipeline.errors import DataError
from llm_pipeline.tasks import builtin_datasets
from llm_pipeline.tasks.text_classification import demo_data

PROSE = (
    "The value is shared by every caller of the {thing}, and a call that fails is tried "
    "again at its end so that the other calls are not held up by it."
)
#: Docstrings per package in the tree the tests build: gamma is the smallest.
SIZES = {"alpha": 30, "beta": 20, "gamma": 5}
#: Each package's first case number, so that no two texts are alike once names are masked.
FIRST = {"alpha": 0, "beta": 100, "gamma": 200}


def _tree(root: Path) -> Path:
    """Packages alpha, beta and gamma, each a module of documented functions."""
    for package, count in SIZES.items():
        functions = "".join(
            f'''
            def {package}_{i}():
                """Handle case number {i} of the {package} set.

                {PROSE.format(thing=f"{package.title()} function {i}, not gamma,")}
                """
            '''
            for i in range(FIRST[package], FIRST[package] + count)
        )
        path = root / package / "core.py"
        path.parent.mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        path.write_text(textwrap.dedent(functions))
    return root


def test_rows_are_docstrings_labelled_with_the_largest_packages(tmp_path: Path) -> None:
    splits = demo_data.build_package_splits([_tree(tmp_path)], seed=0, workers=1, packages=2)
    rows = [row for split in splits.values() for row in split]
    assert sorted({row["label"] for row in rows}) == ["alpha", "beta"]
    assert len(rows) == SIZES["alpha"] + SIZES["beta"]
    row = next(row for row in rows if row["text"].startswith("Handle case number 103 "))
    # The labels' names are masked, in any case (gamma is no label); the documented
    # object's name (beta_103) and module (beta.core) are never in the text.
    assert row == {
        "text": "Handle case number 103 of the pkg set. "
        + PROSE.format(thing="pkg function 103, not gamma,"),
        "label": "beta",
    }
    assert not any("_" in row["text"] or "core" in row["text"] for row in rows)


def test_splits_are_held_out_by_hash_and_the_same_on_every_build(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    splits = demo_data.build_package_splits([root], seed=3, workers=1)
    assert not any("gamma" in row["text"] for rows in splits.values() for row in rows)
    assert list(splits) == ["train", "validation", "test"]
    texts = [[row["text"] for row in rows] for rows in splits.values()]
    assert sum(map(len, texts)) == sum(SIZES.values())
    assert len(set().union(*map(set, texts))) == sum(SIZES.values())  # disjoint
    assert 0 < len(texts[1]) + len(texts[2]) < len(texts[0])
    assert splits == demo_data.build_package_splits([root], seed=3, workers=2)
    assert splits != demo_data.build_package_splits([root], seed=4, workers=1)


def test_ties_between_packages_are_broken_by_name() -> None:
    pairs = [
        docstrings.DocstringPair("f", "body", "summary", module=module)
        for module in ["zeta.a", "zeta.b", "eta", "eta.c", "beta.d", ""]
    ]
    assert demo_data.largest_packages(pairs, 2) == ["eta", "zeta"]


def test_data_dataset_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _tree(tmp_path)
    monkeypatch.setattr(docstrings, "default_roots", lambda: [root])
    source = load_source(
        DataConfig(dataset=demo_data.NAME),
        tmp_path / "scratch",
        builtins=builtin_datasets(),
    )
    assert source.splits["train"].column_names == ["text", "label"]
    assert set(source.splits["train"]["label"]) == set(SIZES)
    with pytest.raises(DataError, match="'builtin:docstring_packages' \\(the same docstrings"):
        load_builtin("builtin:packages", seed=0, builtins=builtin_datasets())
