"""Exact match: whether a response says just what its reference says.

Normalised before comparing, so that formatting a reader would not notice does not count:
Unicode NFKC (full-width letters, ligatures and non-breaking spaces become their plain
forms), case folded, leading and trailing whitespace dropped, and every run of whitespace
inside (newlines too) made one space. Punctuation and articles are kept, unlike SQuAD's
normalisation: an instruction's answer may be code or a name, where `f(x)` and `f x`, or
"The Who" and "Who", differ.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ExactMatch", "exact_match", "normalize_answer"]


def normalize_answer(text: str) -> str:
    """`text` as exact match compares it (see the module's docstring)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@dataclass(frozen=True)
class ExactMatch:
    """The share of responses that match their reference (×100), and each one's 0 or 100."""

    score: float
    per_example: list[float]


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> ExactMatch:
    """Exact match of each prediction against its reference, after `normalize_answer`."""
    if len(predictions) != len(references):
        raise ValueError(
            f"{len(predictions)} predictions but {len(references)} references: one each"
        )
    if not predictions:
        raise ValueError("no predictions to score")
    each = [
        100.0 if normalize_answer(p) == normalize_answer(r) else 0.0
        for p, r in zip(predictions, references, strict=True)
    ]
    return ExactMatch(score=sum(each) / len(each), per_example=each)
