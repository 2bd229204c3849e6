"""The instruction-tuning demo's dataset, built offline: `builtin:instructions`.

The docstring pairs of `builtin:docstrings` (the summarization demo's) asked the other way
round, as a user asks an assistant, in the same splits and order:

- `prompt`: ``What does `json.decoder.JSONDecoder.raw_decode` do?`` (the object's dotted
  name, its module included, so that the question says which `load` it means);
- `response`: the docstring's summary line, which PEP 257 makes exactly that answer. The
  summary lines vary in length (3 to 30 words), which is what packing is for.

The wording is `instruction`, which the preference demo's prompts share
(tasks/preference_tuning/demo_data.py: its pairs continue this demo's model).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llm_pipeline.data.docstrings import DocstringPair, build_pair_splits
from llm_pipeline.tasks.base import BuiltinDataset

#: How `data.dataset` names this dataset.
NAME = "builtin:instructions"


def instruction(pair: DocstringPair) -> dict[str, str]:
    """The question about the documented object, and its summary line: the instruction
    demo's row, whose prompts the preference demo asks too."""
    return {"prompt": f"What does `{pair.qualified_name}` do?", "response": pair.summary}


def build_instruction_splits(
    roots: Sequence[Path] | None = None, *, seed: int = 0, workers: int | None = None
) -> dict[str, list[dict[str, str]]]:
    """`{split: [{"prompt", "response"}]}` for `roots` (default: this Python's standard
    library and site-packages), in the docstring dataset's splits and order."""
    splits = build_pair_splits(roots, seed=seed, workers=workers)
    return {name: [instruction(pair) for pair in pairs] for name, pairs in splits.items()}


DATASET = BuiltinDataset(
    description="the same docstrings as prompt/response pairs", build=build_instruction_splits
)
