"""A tokenized preference (DPO) dataset for the tests of training: pairs of answers made of
the words of the offline word tokenizer (tests/data/word_tokenizer.py, ChatML template),
run through the task's own pair encoder (`preprocess.encode_pairs`) and saved as the
preprocess step saves its output, so these tests need no preprocess step.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .data.word_tokenizer import CHATML, WORDS, load, word_tokenizer

#: Longest pair row in tokens (each answer with the prompt).
MAX_LENGTH = 48


def preference_rows(count: int, *, seed: int) -> list[dict[str, str]]:
    """`count` rows: a prompt of 3-6 words, two different answers of 1-4 words."""
    chooser = random.Random(seed)
    rows = []
    while len(rows) < count:
        prompt, chosen, rejected = (
            " ".join(chooser.choices(WORDS[3:], k=chooser.randint(low, high)))
            for low, high in ((3, 6), (1, 4), (1, 4))
        )
        if chosen != rejected:
            rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return rows


def write_preference_dataset(folder: Path, *, train_rows: int, validation_rows: int) -> Path:
    """The tokenizer (in `folder/tokenizer`) and the tokenized pairs (`folder/tokenized`,
    returned): what a preference-tuning run of the tiny Llama reads."""
    import datasets

    from llm_pipeline.tasks.chat import ChatFormat
    from llm_pipeline.tasks.preference_tuning.preprocess import encode_pairs

    tokenizer = load(word_tokenizer(folder / "tokenizer", chat_template=CHATML))
    raw = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(preference_rows(train_rows, seed=1)),
            "validation": datasets.Dataset.from_list(preference_rows(validation_rows, seed=2)),
        }
    )
    work = folder / "work"
    work.mkdir()
    pairs, _ = encode_pairs(
        raw,
        chat_format=ChatFormat.for_tokenizer(tokenizer),
        max_length=MAX_LENGTH,
        work_dir=work,
    )
    tokenized = folder / "tokenized"
    pairs.save_to_disk(str(tokenized))
    (tokenized / "preprocess.json").write_text(json.dumps({"chat_template": CHATML}))
    return tokenized
