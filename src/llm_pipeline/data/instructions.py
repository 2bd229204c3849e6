"""The instruction-tuning demo's dataset, built offline from the installed code's docstrings.

The same pairs as `builtin:docstrings` (data/docstrings.py: parsed, never imported; prose
only; deduplicated; split by a seeded hash of the summary, so both datasets put a docstring
in the same split), asked the other way round, as a user asks an assistant:

- `prompt`: ``What does `json.decoder.JSONDecoder.raw_decode` do?`` (the object's dotted
  name, its module included, so that the question says which `load` it means);
- `response`: the docstring's summary line, which PEP 257 makes exactly that answer.

Every machine that runs the pipeline has these texts, with no network, and they are real
text written by people; the summary lines vary in length (3 to 30 words), which is what
packing is for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llm_pipeline.data.docstrings import DocstringPair, build_pair_splits

#: How `data.dataset` names this dataset.
NAME = "builtin:instructions"


def instruction(pair: DocstringPair) -> dict[str, str]:
    """One row: the question about the documented object, and its summary line."""
    return {"prompt": f"What does `{pair.qualified_name}` do?", "response": pair.summary}


def build_instruction_splits(
    roots: Sequence[Path] | None = None, *, seed: int = 0, workers: int | None = None
) -> dict[str, list[dict[str, str]]]:
    """`{split: [{"prompt", "response"}]}` for `roots` (default: this Python's standard
    library and site-packages), in the docstring dataset's splits and order."""
    splits = build_pair_splits(roots, seed=seed, workers=workers)
    return {name: [instruction(pair) for pair in pairs] for name, pairs in splits.items()}
