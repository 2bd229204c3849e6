"""The preference tuning demo's dataset, built offline: which summary line answers the question.

The instruction-tuning demo (`builtin:instructions`, tasks/instruction_tuning/demo_data.py)
asks about each documented object and answers with its docstring's summary line. This
dataset asks the same question, in the same words and the same splits, so the model that
demo ships is a sensible place for DPO to start, and pairs two answers to it:

- `prompt`: ``What does `json.decoder.JSONDecoder.raw_decode` do?`` (as in
  `builtin:instructions`);
- `chosen`: the object's own summary line;
- `rejected`: the summary line of another object in the same module: the same vocabulary
  and house style, so what tells the two apart is which object the question names, not how
  the answer is written.

A module with one object gives no pair. The rejected line is drawn from the whole module
(every split), by a seeded hash of the two summaries: the other object with the smallest
draw. So the same installed packages always give the same pairs, and an object added to a
module changes only the pairs whose rejected line it now wins. Held-out pairs may reject a
line that is a training pair's chosen answer: it is the wrong answer to their question,
which is what the evaluation asks the model to tell.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from llm_pipeline.data.docstrings import (
    DocstringPair,
    build_pair_splits,
    unit_hash,
)
from llm_pipeline.tasks.base import BuiltinDataset
from llm_pipeline.tasks.instruction_tuning.demo_data import instruction

#: How `data.dataset` names this dataset.
NAME = "builtin:preferences"


def rejected_summaries(pairs: Sequence[DocstringPair], *, seed: int) -> dict[DocstringPair, str]:
    """For each pair whose module documents another object: that other object's summary line,
    the one with the smallest seeded draw over both summaries."""
    by_module: dict[str, list[DocstringPair]] = defaultdict(list)
    for pair in pairs:
        if pair.module:
            by_module[pair.module].append(pair)
    rejected = {}
    for members in by_module.values():
        for pair in members:
            others = [other.summary for other in members if other.summary != pair.summary]
            if others:
                rejected[pair] = min(
                    others,
                    key=lambda other: (unit_hash(f"{pair.summary}\0{other}", seed + 2), other),
                )
    return rejected


def build_preference_splits(
    roots: Sequence[Path] | None = None, *, seed: int = 0, workers: int | None = None
) -> dict[str, list[dict[str, str]]]:
    """`{split: [{"prompt", "chosen", "rejected"}]}` for `roots` (default: this Python's
    standard library and site-packages), in `builtin:instructions`' splits and order."""
    splits = build_pair_splits(roots, seed=seed, workers=workers)
    rejected = rejected_summaries([pair for rows in splits.values() for pair in rows], seed=seed)
    return {
        name: [
            {
                "prompt": instruction(pair)["prompt"],
                "chosen": pair.summary,
                "rejected": rejected[pair],
            }
            for pair in rows
            if pair in rejected
        ]
        for name, rows in splits.items()
    }


DATASET = BuiltinDataset(
    description="the same prompts, each with its own summary line chosen and another object's "
    "of the same module rejected",
    build=build_preference_splits,
)
