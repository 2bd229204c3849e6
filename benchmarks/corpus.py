"""The text the summarization benchmarks read: the project's own by default, published data
sets only when asked for.

Why: a benchmark must run from a fresh clone with nothing beside it, as the tests do. So
each one's default text is the standard library's docstring pairs (document: a name and the
prose after the summary line; summary: the summary line), built offline by the builder of
`builtin:docstrings` (tasks/summarization/demo_data.py) over the standard library only:
seconds, and the same pairs on every machine with the same Python.

The published data sets (DialogSum, CNN/DailyMail), on which earlier figures were measured,
live in a `shared/data` folder beside the checkout, which a fresh clone does not have.
`--data dialogsum` (or `cnndm`) reads them from there; where that folder is absent the
script says so in one line and stops.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import sys
import sysconfig
from pathlib import Path
from typing import Any

from llm_pipeline.tasks.summarization.demo_data import build_docstring_splits

#: The published data sets, beside the checkout (never inside it).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DIALOGSUM = SHARED_DATA / "dialogsum"
#: `--data`'s default: the project's own pairs.
DOCSTRINGS = "docstrings"
Rows = list[dict[str, str]]


def add_data_option(parser: argparse.ArgumentParser, published: str) -> None:
    """`--data`: the project's docstring pairs (default) or the published data set named."""
    parser.add_argument(
        "--data",
        choices=[DOCSTRINGS, published],
        default=DOCSTRINGS,
        help=f"{DOCSTRINGS}: the standard library's docstring pairs, built offline (default); "
        f"{published}: the published data set in {SHARED_DATA}, if present",
    )


def published(path: Path) -> Path:
    """`path` inside the shared data folder; exits with one line when it is absent."""
    if not path.exists():
        sys.exit(
            f"skipped: {path} is absent (published data sets live in shared/data beside the "
            f"checkout); without --data the benchmark runs on the project's own text"
        )
    return path


def docstring_pairs(count: int | None = None) -> Rows:
    """The first `count` (default: all) standard-library docstring pairs, in the build's
    seeded order (its train split, then validation, then test), as document/summary rows."""
    splits = build_docstring_splits([Path(sysconfig.get_paths()["stdlib"])], seed=0)
    rows = [row for split in ("train", "validation", "test") for row in splits[split]]
    return rows[:count]


def dialogsum(split: str, count: int | None = None) -> Rows:
    """The first `count` (default: all) dialogues of a DialogSum split, as document/summary
    rows; exits with one line when the shared data folder has no DialogSum."""
    return dialogue_rows(published(DIALOGSUM / f"{split}.jsonl"), count)


def dialogue_rows(path: Path, count: int | None = None) -> Rows:
    """The first `count` records of a DialogSum-style JSON-lines file (`dialogue`, `summary`;
    gzipped when its name ends in .gz), as document/summary rows: a copy carried to a
    machine that has no shared folder beside the checkout."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in itertools.islice(f, count)]
    return [{"document": r["dialogue"], "summary": r["summary"]} for r in records]


def summarization_rows(data: str, split: str, count: int | None = None) -> tuple[str, Rows]:
    """What `--data` names, as (a name for the printout, document/summary rows); `split` is
    the DialogSum split (the docstring pairs are read whole, in their seeded order)."""
    if data == DOCSTRINGS:
        return "standard-library docstring pairs", docstring_pairs(count)
    return f"DialogSum {split} dialogues", dialogsum(split, count)
