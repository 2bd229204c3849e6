"""Fixtures for the evaluation tests' published-table checks: CNN/DailyMail, XSum and SAMSum
as released, with the systems' outputs behind their published ROUGE tables, in ../shared/data
beside the checkout. Those checks skip where it is absent; the other evaluation tests need
nothing beside the checkout (their real text is the docstring pairs of tests/docstring_data.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

# The data may not be committed (see its README), so it lives beside the checkout.
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder; tests that need it skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(
            "published-table check (the CNN/DailyMail, XSum and SAMSum releases behind "
            "published ROUGE tables): "
            f"{SHARED_DATA} is absent (../shared/data beside the checkout; see its README)"
        )
    return SHARED_DATA


def _require(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"published-table check: {path} is absent (../shared/data beside the checkout)")
    return path


def _read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def cnndm_test(shared_data: Path) -> list[dict[str, Any]]:
    """The 11,490 CNN/DailyMail test articles with See et al. (2017)'s system outputs."""
    return _read_jsonl(_require(shared_data / "cnn_dailymail_test/cnndm_test_see2017.jsonl.gz"))


@pytest.fixture(scope="session")
def xsum_gold_and_ptgen(shared_data: Path) -> tuple[list[str], list[str]]:
    """XSum gold test summaries and the pointer-generator's outputs, line-aligned."""
    folder = shared_data / "xsum_test" / "xsum-model-predictions"
    gold = _read_lines(_require(folder / "gold-test-sentences.txt.gz"))
    ptgen = _read_lines(_require(folder / "ptgen-test-output.txt.gz"))
    assert len(gold) == len(ptgen), "the XSum release's files are line-aligned"
    return gold, ptgen


@pytest.fixture(scope="session")
def samsum_test(shared_data: Path) -> list[dict[str, Any]]:
    """SAMSum test dialogues (newline-separated turns) with one-paragraph summaries."""
    return _read_jsonl(_require(shared_data / "samsum_test" / "test.jsonl"))
