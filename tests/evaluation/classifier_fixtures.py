"""A tiny trained classifier folder and a preprocessed classification dataset, built here in
the contract's format (the finetune and preprocess steps' outputs), for evaluation tests.

The rows are short sentences about three topics, imbalanced as real label sets are (the
majority class is a real floor). The model is a 2-layer BERT (hidden size 32) with the
offline MiniLM tokenizer, trained for a few dozen steps with plain PyTorch so that its
predictions depend on the text: a random head would give one label to every row and hide
ordering and padding mistakes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import datasets
import torch

from llm_pipeline.output_files import RESOLVED_CONFIG_FILE
from llm_pipeline.tasks.text_classification.labels import LABEL_SET_KEY, LabelSet

from .generate_fixtures import minilm_tokenizer_dir

NAMES = ("sports", "weather", "music")
TINY_BERT = {
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}
SEED = 7
_WORDS = {
    "sports": ["match", "goal", "team", "coach", "league", "score"],
    "weather": ["rain", "storm", "sunny", "forecast", "wind", "snow"],
    "music": ["song", "band", "album", "guitar", "concert", "melody"],
}
_FILLER = ["the", "today", "we", "saw", "a", "new", "big", "after", "again", "it", "was"]
#: Rows per label in each split: sports is the majority class.
SPLIT_COUNTS = {
    "train": {"sports": 30, "weather": 15, "music": 10},
    "validation": {"sports": 6, "weather": 4, "music": 3},
    "test": {"sports": 12, "weather": 8, "music": 6},
}


def sentences(split: str) -> list[tuple[str, str]]:
    """(text, label) rows of a split: each text mixes filler with two of its topic's words."""
    rng = random.Random(f"{split}-{SEED}")
    rows = []
    for name, count in SPLIT_COUNTS[split].items():
        for _ in range(count):
            words = rng.sample(_FILLER, 4) + rng.sample(_WORDS[name], 2)
            rng.shuffle(words)
            rows.append((" ".join(words), name))
    rng.shuffle(rows)
    return rows


def label_set() -> LabelSet:
    return LabelSet(names=NAMES, train_counts=dict(SPLIT_COUNTS["train"]))


def build_dataset(folder: Path, *, pairs: bool = False) -> Path:
    """The preprocess step's output for the rows above (with a `text_pair` when `pairs`)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_tokenizer_dir())
    labels = label_set()
    splits = {}
    for split in SPLIT_COUNTS:
        rows = sentences(split)
        texts = [text for text, _ in rows]
        columns: dict[str, Any] = {"text": texts}
        if pairs:
            columns["text_pair"] = [f"a note on {text.split()[0]}" for text in texts]
            encoded = tokenizer(texts, columns["text_pair"], truncation=True, max_length=64)
        else:
            encoded = tokenizer(texts, truncation=True, max_length=64)
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            columns[key] = encoded[key]
        columns["labels"] = [labels.label2id[name] for _, name in rows]
        columns["label"] = [name for _, name in rows]
        splits[split] = datasets.Dataset.from_dict(columns)
    datasets.DatasetDict(splits).save_to_disk(str(folder))
    report = {LABEL_SET_KEY: labels.to_dict(), "splits": {s: len(v) for s, v in splits.items()}}
    (folder / "preprocess.json").write_text(json.dumps(report))
    return folder


def build_classifier(folder: Path, dataset: Path, *, steps: int = 30) -> Path:
    """A tiny BERT classifier trained on `dataset`'s train split, saved as finetune saves
    one (config with the label set, weights, tokenizer, the resolved `model` settings)."""
    from transformers import (
        AutoConfig,
        AutoModelForSequenceClassification,
        AutoTokenizer,
        set_seed,
    )

    tokenizer = AutoTokenizer.from_pretrained(minilm_tokenizer_dir())
    labels = label_set()
    settings = dict(TINY_BERT)
    config = AutoConfig.for_model(
        settings.pop("model_type"),
        vocab_size=len(tokenizer),
        **settings,
        **labels.model_config_fields(),
    )
    # Seeded as training seeds it (transformers' set_seed): with no steps this is the very
    # model the evaluate step rebuilds as "before fine-tuning".
    set_seed(SEED)
    model = AutoModelForSequenceClassification.from_config(config)
    train = datasets.load_from_disk(str(dataset))["train"]
    # The whole training split is one batch: 55 short rows.
    batch = tokenizer.pad(
        {"input_ids": train["input_ids"], "attention_mask": train["attention_mask"]},
        return_tensors="pt",
    )
    targets = torch.tensor(train["labels"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(steps):
        model(**batch, labels=targets).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    recorded = {
        "model": {"architecture": TINY_BERT, "tokenizer": str(minilm_tokenizer_dir())},
        "train": {"seed": SEED},
    }
    (folder / RESOLVED_CONFIG_FILE).write_text(json.dumps(recorded))
    return folder
