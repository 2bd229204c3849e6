"""A tokenized classification dataset for the training tests, in the preprocess step's layout.

The contract (issue 18's shared brief): a `save_to_disk` DatasetDict whose rows hold unpadded
`input_ids` and `attention_mask` (and `token_type_ids` where the tokenizer makes them),
`labels` (the label id; multi-label: 0/1 floats per label), the raw `text` and the `label`'s
name (multi-label: the list of names); `preprocess.json` beside them holds the label set
(`LabelSet.to_dict()`, key `label_set`). The rows are built directly in that layout, so these
tests need no preprocess step.

The texts are toy sentences whose topic words say their label (weather, sports, cooking),
among words every topic shares: a small network separates them in a few dozen steps.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from llm_pipeline.tasks.text_classification.labels import LABEL_SET_KEY, LabelSet

TOPICS: dict[str, list[str]] = {
    "weather": ["rain", "snow", "cloud", "storm", "sunny", "wind", "fog", "thunder"],
    "sports": ["football", "goal", "team", "match", "score", "tennis", "coach", "league"],
    "cooking": ["recipe", "oven", "bake", "flour", "sauce", "garlic", "kitchen", "soup"],
}
SHARED = ["the", "today", "we", "saw", "really", "some", "very", "about", "and", "was"]


def topic_text(topics: list[str], rng: random.Random) -> str:
    """A sentence of shared words and of two to three words of each topic in `topics`."""
    words = rng.sample(SHARED, 4)
    for topic in topics:
        words += rng.sample(TOPICS[topic], rng.randint(2, 3))
    rng.shuffle(words)
    return " ".join(words)


def single_label_rows(count: int, *, seed: int, weights: list[float]) -> list[tuple[str, str]]:
    """(text, label) pairs with labels drawn in proportion to `weights` (one per topic)."""
    rng = random.Random(seed)
    names = list(TOPICS)
    labels = rng.choices(names, weights=weights, k=count)
    return [(topic_text([label], rng), label) for label in labels]


def multi_label_rows(count: int, *, seed: int) -> list[tuple[str, list[str]]]:
    """(text, labels) pairs of one or two topics each."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        labels = sorted(rng.sample(list(TOPICS), rng.choice([1, 1, 2])))
        rows.append((topic_text(labels, rng), labels))
    return rows


def write_classification_dataset(
    folder: Path,
    splits: dict[str, list[tuple[str, Any]]],
    tokenizer: Any,
    *,
    multi_label: bool = False,
    max_length: int = 32,
) -> Path:
    """`splits` of (text, label) pairs tokenized and saved as preprocess saves them."""
    import datasets

    names = tuple(TOPICS)
    index = {name: i for i, name in enumerate(names)}

    def encode(label: Any) -> Any:
        if multi_label:
            return [1.0 if name in label else 0.0 for name in names]
        return index[label]

    columns: dict[str, datasets.Dataset] = {}
    for split, pairs in splits.items():
        texts = [text for text, _ in pairs]
        encoded = tokenizer(texts, truncation=True, max_length=max_length)
        rows: dict[str, Any] = {key: list(values) for key, values in encoded.items()}
        rows["labels"] = [encode(label) for _, label in pairs]
        rows["text"] = texts
        rows["label"] = [label for _, label in pairs]
        features = {key: datasets.Sequence(datasets.Value("int32")) for key in encoded}
        features["labels"] = (
            datasets.Sequence(datasets.Value("float32")) if multi_label else datasets.Value("int64")
        )
        features["text"] = datasets.Value("string")
        features["label"] = (
            datasets.Sequence(datasets.Value("string")) if multi_label else datasets.Value("string")
        )
        columns[split] = datasets.Dataset.from_dict(rows, features=datasets.Features(features))
    tokenized = folder / "tokenized"
    datasets.DatasetDict(columns).save_to_disk(str(tokenized))
    train_labels = [label for _, label in splits["train"]]
    counts = {
        name: sum(name in label if multi_label else name == label for label in train_labels)
        for name in names
    }
    label_set = LabelSet(names=names, multi_label=multi_label, train_counts=counts)
    report = {
        LABEL_SET_KEY: label_set.to_dict(),
        "splits": {split: {"rows": len(pairs)} for split, pairs in splits.items()},
    }
    (tokenized / "preprocess.json").write_text(json.dumps(report, indent=2) + "\n")
    return tokenized
