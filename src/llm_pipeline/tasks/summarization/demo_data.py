"""The summarization demo's dataset, built offline: `builtin:docstrings`.

Each docstring pair of this Python's installed code (data/docstrings.py says how they are
parsed, kept and split) becomes one row:

- `document`: the object's qualified name (`JSONDecoder.raw_decode`), a colon, and the
  prose paragraphs of the docstring after its summary;
- `summary`: the summary paragraph, on one line.

The name is part of the document because a docstring is written for a reader who knows what
it documents, as an article's reader knows its headline.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llm_pipeline.data.docstrings import build_pair_splits
from llm_pipeline.tasks.base import BuiltinDataset

#: How `data.dataset` names this dataset.
NAME = "builtin:docstrings"


def build_docstring_splits(
    roots: Sequence[Path] | None = None, *, seed: int = 0, workers: int | None = None
) -> dict[str, list[dict[str, str]]]:
    """`{split: [{"document", "summary"}]}`: the docstring dataset for `roots` (default: this
    Python's standard library and site-packages), split and ordered by seeded hash."""
    splits = build_pair_splits(roots, seed=seed, workers=workers)
    return {
        name: [{"document": pair.document, "summary": pair.summary} for pair in pairs]
        for name, pairs in splits.items()
    }


DATASET = BuiltinDataset(
    description="document/summary pairs from the docstrings of the installed Python packages",
    build=build_docstring_splits,
)
