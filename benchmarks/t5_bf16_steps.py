"""Steps lost in a bf16 T5-base run: the issue's 300-step DialogSum run, through `run_finetune`.

On one H200, a T5-base-shaped summarization run (bf16, ZeRO-3, batch 32, <= 512 + 64
tokens, lr 5e-4, DialogSum train) skipped 15 of its 300 steps on non-finite gradients. This
runs the same shape, rows and optimizer settings through the finetune step's own code, once
per attention implementation asked for (`sdpa`, transformers' default for T5, sends the
learned position bias to the fused kernels as a float mask that needs a gradient; `eager`
is the plain softmax(QK^T + bias) V), and prints what the finetune metrics count:
`skipped_steps` (DeepSpeed's overflow skips) and `nonfinite_steps` (a non-finite gradient
norm on the plain Trainer, which does not skip), the largest logged gradient norm, the
first and last logged loss, and tokens/s. A run that loses most of its recent steps stops
(`train/step_health.py`); the row says so.

Text: the standard library's docstring pairs by default (a fresh clone has nothing else);
`--data dialogsum` reads DialogSum's train split from the shared data folder beside the
checkout, and `--data-file PATH` a copy of it carried elsewhere (JSON lines with `dialogue`
and `summary`, `.gz` allowed): the issue's run, and the figures in the README, are DialogSum.

    python benchmarks/t5_bf16_steps.py [--stage auto|0|2|3] [--attention sdpa eager]
        [--steps 300] [--data docstrings|dialogsum] [--data-file PATH] [--tiny] [--json PATH]

`--tiny`: a T5 of 2 + 2 layers of 64 on 64 rows for 4 steps, fp32 on the CPU (the test
suite's smoke run; the figures mean nothing there).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import corpus  # benchmarks/corpus.py, beside this file
import torch
from gpu_train import Shape, model_config, shapes, tokenized  # benchmarks/gpu_train.py

from llm_pipeline.config import ClusterConfig, DataConfig, TrainConfig
from llm_pipeline.errors import UserError
from llm_pipeline.train.job import run_finetune


def t5_base(tiny: bool) -> Shape:
    """T5-base's published shape (220M with T5's vocabulary) at the issue's batch and
    lengths, or `gpu_train`'s tiny T5."""
    if tiny:
        return shapes(tiny=True)[0]
    architecture = {
        "model_type": "t5",
        "d_model": 768,
        "d_ff": 3072,
        "num_layers": 12,
        "num_decoder_layers": 12,
        "num_heads": 12,
        "d_kv": 64,
        "dropout_rate": 0.0,
    }
    return Shape("t5-base", "summarization", architecture, batch=32, source=512, target=64)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="auto", help="train.zero_stage (default auto)")
    parser.add_argument("--attention", nargs="+", default=["sdpa"], choices=["sdpa", "eager"])
    parser.add_argument("--steps", type=int, help="optimizer steps (300; --tiny 4)")
    corpus.add_data_option(parser, "dialogsum")
    parser.add_argument("--data-file", type=Path, help="a DialogSum-style JSON-lines file")
    parser.add_argument("--tiny", action="store_true", help="tiny shape, fp32, CPU-sized")
    parser.add_argument("--json", type=Path, default=Path("t5_bf16_steps.json"))
    return parser.parse_args(argv)


def run_one(
    attention: str, shape: Shape, dataset: Path, work: Path, args: argparse.Namespace, steps: int
) -> dict[str, Any]:
    """One training run; its figures (or why it stopped)."""
    stage: dict[str, Any] = {"zero_stage": int(args.stage) if args.stage.isdigit() else "auto"}
    train = TrainConfig(
        max_steps=steps,
        per_device_batch_size=shape.batch,
        learning_rate=5e-4,
        warmup_steps=min(20, steps // 4),
        logging_steps=max(1, min(25, steps // 4)),
        save_steps=100 * steps,
        precision="fp32" if args.tiny or not torch.cuda.is_available() else "bf16",
        **stage,
    )
    architecture = {**shape.architecture, "attn_implementation": attention}
    model = model_config(replace(shape, architecture=architecture))
    started = time.perf_counter()
    row: dict[str, Any] = {"attention": attention, "stage": args.stage, "steps": steps}
    try:
        result = run_finetune(
            dataset_dir=str(dataset),
            output_dir=str(work / f"model-{attention}"),
            model=model,
            train=train,
            cluster=ClusterConfig(processes=1),
            task="summarization",
        )
    except UserError as exc:
        row["stopped"] = " ".join(str(exc).split())[:400]
        row["elapsed_s"] = time.perf_counter() - started
        return row
    metrics = result.metrics
    losses = [e["loss"] for e in result.log_history if "loss" in e]
    norms = [e["grad_norm"] for e in result.log_history if "grad_norm" in e]
    row.update(
        skipped_steps=metrics.get("skipped_steps"),
        nonfinite_steps=metrics.get("nonfinite_steps"),
        zero_stage=metrics.get("zero_stage"),
        first_loss=losses[0] if losses else None,
        last_loss=losses[-1] if losses else None,
        max_grad_norm=max(map(float, norms)) if norms else None,
        tokens_per_second=metrics.get("train_tokens_per_second"),
        elapsed_s=time.perf_counter() - started,
    )
    return row


def line(row: dict[str, Any]) -> str:
    if "stopped" in row:
        return f"{row['attention']:6} stage {row['stage']}: stopped: {row['stopped']}"
    return (
        f"{row['attention']:6} stage {row['stage']} (ran {row['zero_stage']}): "
        f"{row['steps']} steps, skipped {row['skipped_steps']}, non-finite "
        f"{row['nonfinite_steps']}, loss {row['first_loss']} -> {row['last_loss']}, max grad "
        f"norm {row['max_grad_norm']}, {row['tokens_per_second'] or 0:,.0f} tokens/s, "
        f"{row['elapsed_s']:.0f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    steps = args.steps or (4 if args.tiny else 300)
    shape = t5_base(args.tiny)
    count = 64 if args.tiny else steps * shape.batch + 16
    if args.data_file is not None:
        name, rows = f"{args.data_file}", corpus.dialogue_rows(args.data_file, count)
    else:
        name, rows = corpus.summarization_rows(args.data, "train", count)
    data = DataConfig(
        dataset="x",
        prefix="summarize: ",
        max_source_length=shape.source,
        max_target_length=shape.target,
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="t5-bf16-") as scratch:
        work = Path(scratch)
        dataset = tokenized(work, "dialogsum", rows, shape, model_config(shape), data)
        print(f"{len(rows)} rows: {name}", flush=True)
        for attention in args.attention:
            row = run_one(attention, shape, dataset, work, args, steps)
            results.append(row)
            print(line(row), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print("\n" + "\n".join(map(line, results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
