"""Real text for every test that needs some: the project's own `builtin:docstrings` dataset.

`llm_pipeline.data.docstrings` builds (document, summary) pairs offline from Python
docstrings, so the tests need nothing beside the checkout. Here it reads the standard
library only: seconds instead of the minute all of site-packages takes on two cores.

The build's held-out splits are small for the standard library alone (a few dozen rows
each), so the tests' dataset carves its own three splits, one after the other, out of the
build's train split, whose order is already a seeded shuffle: they are disjoint, and the
same on every run with the same Python.

tests/conftest.py writes them once per session (the `docstring_data` fixture); code that
needs pairs outside a fixture (tests/containers/job.py) calls `docstring_splits()`, which
builds once per process.
"""

from __future__ import annotations

import functools
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

Rows = list[dict[str, str]]

#: The standard library: the one root read, for speed.
STDLIB = Path(sysconfig.get_paths()["stdlib"])
#: Rows in each split of the tests' dataset, carved in this order.
SPLIT_ROWS = {"train": 300, "validation": 100, "test": 50}
#: The build's seed.
SEED = 0


@functools.cache
def _stdlib_build() -> dict[str, Rows]:
    # Imported here: llm_pipeline.data imports `datasets`, which tests that need no text
    # should not wait for.
    from llm_pipeline.tasks.summarization.demo_data import build_docstring_splits

    return build_docstring_splits([STDLIB], seed=SEED)


def docstring_splits() -> dict[str, Rows]:
    """`{split: [{"document", "summary"}]}` with SPLIT_ROWS rows each (fresh copies)."""
    pairs = _stdlib_build()["train"]
    needed = sum(SPLIT_ROWS.values())
    if len(pairs) < needed:
        raise RuntimeError(
            f"the standard library at {STDLIB} gave {len(pairs)} docstring pairs for "
            f"training; the tests' splits need {needed}"
        )
    splits, start = {}, 0
    for split, count in SPLIT_ROWS.items():
        splits[split] = [dict(row) for row in pairs[start : start + count]]
        start += count
    return splits


def write_jsonl_splits(folder: Path, splits: dict[str, Rows]) -> Path:
    """`folder/<split>.jsonl` for each split, as a user's own data folder holds them."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        (folder / f"{split}.jsonl").write_text(text, encoding="utf-8")
    return folder


@dataclass(frozen=True)
class DocstringData:
    """The tests' docstring dataset: `folder` holds train.jsonl, validation.jsonl and
    test.jsonl (columns `document`, `summary`); `splits` holds the same rows."""

    folder: Path
    splits: dict[str, Rows]

    def rows(self, split: str, count: int | None = None) -> Rows:
        """The first `count` rows of `split` (all by default), as fresh copies."""
        rows = self.splits[split]
        if count is not None and count > len(rows):
            raise ValueError(f"{count} {split} rows asked for; the tests' dataset has {len(rows)}")
        return [dict(row) for row in rows[:count]]

    def pairs(self, split: str, count: int | None = None) -> list[tuple[str, str]]:
        """(document, summary) tuples of the first `count` rows of `split`."""
        return [(row["document"], row["summary"]) for row in self.rows(split, count)]
