"""Rows an evaluation split shares with train, and train's repeated rows: what the download
step counts and says, and what evaluate's report repeats for the split it scores.

A row's identity is what the model reads of it (`Task.source_texts`: the document, the
prompt or the chat before the answer, the text to classify), so a validation row that is a
training row under another summary or label is still one the model has seen. Each text is
hashed once (16-byte BLAKE2b digests in a set), never compared with another: CNN/DailyMail's
287k training articles cost a pass over their text.

An evaluation row that is also a training row inflates its scores, and the gate trusts
them; the step says how many, of which split, and what to do. Train's own repeats are only
counted: a source may repeat rows on purpose, to weigh them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llm_pipeline.output_files import DATA_NOTES_FILE
from llm_pipeline.tasks import Task

if TYPE_CHECKING:
    import datasets

#: Rows hashed per batch.
BATCH_ROWS = 1000


@dataclass(frozen=True)
class Overlap:
    """What the download step found: train's repeated rows, and each evaluation split's
    rows that are also in train."""

    train_rows: int
    #: Train rows whose text an earlier train row already has.
    train_repeats: int
    #: Per evaluation split: (its rows that are also train rows, its rows).
    shared: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Whether validation was carved from train by the download step.
    carved: bool = False

    def notes(self, task: Task) -> dict[str, str]:
        """What to tell the user, by split (train's repeats under `train`); {} when clean."""
        what = task.source_label
        notes = {}
        if self.train_repeats:
            notes["train"] = (
                f"train: {self.train_repeats:,} of {self.train_rows:,} rows "
                f"{'repeats' if self.train_repeats == 1 else 'repeat'} the {what} of "
                "another train row; they are kept (a source may repeat rows to weigh them)"
            )
        for split, (shared, rows) in self.shared.items():
            if shared:
                notes[split] = _leak_note(split, shared, rows, what, carved=self.carved)
        return notes


def _leak_note(split: str, shared: int, rows: int, what: str, *, carved: bool) -> str:
    has = "has" if shared == 1 else "have"
    said = f"{split}: {shared:,} of its {rows:,} rows {has} the {what} of a train row"
    if carved and split == "validation":
        return (
            f"{said}, though validation was carved from train: train holds duplicate rows, and "
            "the carve put copies of one row on both sides; the model is scored on rows it "
            "trained on, so the scores are inflated and the gate trusts them: dedupe the source"
        )
    hint = "dedupe the source's splits"
    if split == "validation":
        hint += ", or leave validation out of the source and the download step carves it from train"
    else:
        hint += ", or set data.test_split to null to evaluate on validation"
    return (
        f"{said}: the model is scored on rows it trained on, so the scores are inflated and the "
        f"gate trusts them; {hint}"
    )


def find_overlap(splits: Mapping[str, datasets.Dataset], task: Task, *, carved: bool) -> Overlap:
    """Train's repeated rows and each other split's rows that train also has (`splits`: the
    download step's, columns named by role)."""
    seen: set[bytes] = set()
    repeats = 0
    for digest in _digests(splits["train"], task):
        if digest is None:
            continue
        repeats += digest in seen
        seen.add(digest)
    shared = {}
    for name, table in splits.items():
        if name != "train":
            found = sum(d is not None and d in seen for d in _digests(table, task))
            shared[name] = (found, table.num_rows)
    return Overlap(splits["train"].num_rows, repeats, shared, carved)


def _digests(table: datasets.Dataset, task: Task) -> Iterator[bytes | None]:
    for batch in table.iter(batch_size=BATCH_ROWS):
        for text in task.source_texts(batch):
            yield None if text is None else hashlib.blake2b(text.encode(), digest_size=16).digest()


def write_data_notes(folder: str | Path, notes: Mapping[str, str], rows: Mapping[str, int]) -> None:
    """Keep the evaluation splits' notes beside a dataset, with each split's `rows` as the
    download step saved it, for evaluate's report (no file when there are none)."""
    kept = {
        split: {"note": note, "rows": rows.get(split)}
        for split, note in notes.items()
        if split != "train"
    }
    if kept:
        (Path(folder) / DATA_NOTES_FILE).write_text(json.dumps(kept, indent=2) + "\n")


def data_note(
    dataset_dir: str | os.PathLike[str], split: str, scored: int | None = None
) -> str | None:
    """The download step's note on `split` of a preprocessed dataset, saying so where
    evaluate `scored` other than the split's rows it counted (`evaluate.max_samples`, rows
    preprocess dropped); None when it has none (or the folder predates the notes)."""
    path = Path(dataset_dir) / DATA_NOTES_FILE
    try:
        notes = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = notes.get(split) if isinstance(notes, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("note"), str):
        return None
    rows = entry.get("rows")
    if scored is None or not isinstance(rows, int) or scored == rows:
        return str(entry["note"])
    return (
        f"{entry['note']} (counted over the {rows:,} rows the download step saved; evaluate "
        f"scored {scored:,} of them)"
    )
