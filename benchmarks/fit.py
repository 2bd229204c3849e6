"""The fit check's estimates against peak memory measured on this machine's CPU.

For each model shape x dtype x place, a fresh process (training: two torchrun ranks under
ZeRO-3, as the finetune step runs on Vertex, or with `train-plain` the Trainer without
DeepSpeed (DDP), as configs/local.json trains in one process; generation: one process, as
evaluate and the server run) does the real work with the project's own code, and reports
its peak resident memory (VmHWM, the high-water mark of its own address space; `getrusage`'s
ru_maxrss would start from the RSS of the process that started it). Beside it: the estimate
`llm_pipeline.fit` makes for the same settings (the very functions the fit check calls,
device "cpu"), and measured / estimate.

Every process's RSS starts with its runtime: the interpreter, torch, transformers,
DeepSpeed and the buffers their first use allocates. That is not a model's memory, so it is
measured apart and shown in its own column: for training, a rank's RSS before its model is
built; for generation, RSS after a warm-up generate on a tiny model. The estimates add the
fit check's constant for it (`fit.memory.CPU_RUNTIME_GIB`), so the "runtime" columns show
how far that constant is from what was measured.

Training uses `benchmarks/memory.py`'s worker (the finetune step's pieces, saves skipped)
with the model's real dropout (0.1). The ranks run with glibc's mmap threshold fixed, as
memory.py explains, so that RSS counts what the program holds, not what glibc kept.

    .venv/bin/python benchmarks/fit.py [--shapes small,base] [--dtypes fp32,bf16]
        [--places train,train-gc,train-plain,generate] [--steps 2]

Runs take ~20 minutes on 2 cores (T5-base training dominates); pick fewer with the flags.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import memory  # benchmarks/memory.py, beside this file

from llm_pipeline.fit.estimates import generation_memory
from llm_pipeline.fit.memory import CPU_RUNTIME_GIB, GIB, Breakdown, Lengths
from llm_pipeline.fit.shapes import shape_of
from llm_pipeline.fit.states import ZeroPlan, training_memory

RANKS = 2
DROPOUT = 0.1  # google-t5/t5-*'s dropout_rate


@dataclass(frozen=True)
class TrainCase:
    batch: int
    source: int
    target: int


@dataclass(frozen=True)
class GenerateCase:
    batch: int
    beams: int
    source: int
    new_tokens: int


#: Sizes where activations and cache weigh against the weights, yet a run stays ~1 minute.
TRAIN = {"small": TrainCase(8, 256, 64), "base": TrainCase(4, 128, 32)}
GENERATE = {"small": GenerateCase(8, 4, 384, 16), "base": GenerateCase(8, 4, 256, 8)}


def transformers_config(shape: str) -> Any:
    from transformers import AutoConfig

    settings = dict(memory.SHAPES[shape][1])
    settings.update(dropout_rate=DROPOUT, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return AutoConfig.for_model(settings.pop("model_type"), **settings)


def measure_training(
    shape: str, dtype: str, checkpointing: bool, steps: int, work: Path, setting: str = "zero3"
) -> dict[str, Any]:
    """Two ranks training `steps` steps (ZeRO-3, or "dp": the plain Trainer under DDP);
    the larger rank's report."""
    case = TRAIN[shape]
    options = argparse.Namespace(
        steps=steps,
        batch=case.batch,
        seq_len=case.source,
        source_len=case.source,
        target_len=case.target,
        dropout=DROPOUT,
        shape=shape,
        gradient_checkpointing=checkpointing,
        device="cpu",
        precision=dtype,
        glibc_default=False,
    )
    reports = memory.measure(setting, options, RANKS, work)
    return max(reports, key=lambda report: report["peak_rss"])


def estimate_training(
    shape: str, dtype: str, checkpointing: bool, report: dict[str, Any]
) -> Breakdown:
    case = TRAIN[shape]
    deepspeed = report["deepspeed"]
    plan = None
    if deepspeed is not None:
        live = deepspeed["zero_optimization"]["stage3_max_live_parameters"]
        plan = ZeroPlan(stage=3, max_live_parameters=int(live))
    breakdown, _ = training_memory(
        shape_of(transformers_config(shape), name=shape),
        lengths=Lengths(case.batch, case.source, case.target),
        dtype=dtype,
        device="cpu",
        checkpointing=checkpointing,
        zero=plan,
        processes_per_node=RANKS,
        nodes=1,
    )
    return breakdown


def save_model(shape: str, dtype: str, folder: Path) -> None:
    """A randomly initialised model of `shape`, saved in `dtype` with the MiniLM tokenizer."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from llm_pipeline.config import ModelConfig
    from llm_pipeline.models.sources import load_tokenizer

    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(transformers_config(shape))
    model.to(getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[dtype]))
    model.save_pretrained(folder)
    load_tokenizer(ModelConfig(source=memory.MINILM)).save_pretrained(folder)


def generate_worker(options: argparse.Namespace) -> None:
    """One generating process: warm up on a tiny model, then the real batch; print JSON."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from llm_pipeline.models.generation import GenerationSettings, generate_summaries, load_seq2seq

    case = GENERATE[options.shape]
    dtype = getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[options.dtype])
    tiny = transformers_config("small")
    tiny.update(
        {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2}
    )
    warm = AutoModelForSeq2SeqLM.from_config(tiny).to(dtype).eval()
    warm.generation_config.update(decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    settings = GenerationSettings(batch_size=2, max_new_tokens=2, num_beams=2)
    tokenizer = AutoTokenizer.from_pretrained(options.model)
    generate_summaries(warm, tokenizer, [[5, 6, 7, 1], [8, 9, 1]], config=settings)
    del warm
    runtime = memory._current_rss()
    model, tokenizer = load_seq2seq(options.model, device=torch.device("cpu"), dtype=dtype)
    ids = torch.randint(
        1000, 30000, (case.batch, case.source), generator=torch.Generator().manual_seed(0)
    )
    settings = GenerationSettings(
        batch_size=case.batch,
        max_new_tokens=case.new_tokens,
        min_new_tokens=case.new_tokens,
        num_beams=case.beams,
    )
    generate_summaries(model, tokenizer, ids.tolist(), config=settings)
    peak = memory.peak_rss()
    print(json.dumps({"runtime": runtime, "peak_rss": peak}))


def measure_generation(shape: str, dtype: str, folder: Path) -> dict[str, Any]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=memory.FIXED_MMAP_THRESHOLD)
    command = [sys.executable, __file__, "--generate-worker", "--model", str(folder)]
    command += ["--shape", shape, "--dtype", dtype]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"generation {shape} {dtype} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def estimate_generation(shape: str, dtype: str) -> Breakdown:
    case = GENERATE[shape]
    return generation_memory(
        shape_of(transformers_config(shape), name=shape),
        batch=case.batch,
        beams=case.beams,
        source=case.source,
        new_tokens=case.new_tokens,
        dtype=dtype,
        device="cpu",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small,base")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--places", default="train,train-gc,generate")
    parser.add_argument("--steps", type=int, default=2, help="Training steps per run.")
    parser.add_argument("--generate-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.generate_worker:
        generate_worker(options)
        return
    shapes = options.shapes.split(",")
    dtypes = options.dtypes.split(",")
    places = options.places.split(",")
    rows = []
    parts: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-fit-") as tmp:
        for shape in shapes:
            for dtype in dtypes:
                for place in places:
                    started = time.perf_counter()
                    work = Path(tmp) / f"{shape}-{dtype}-{place}"
                    if place.startswith("train"):
                        gc = place == "train-gc"
                        setting = "dp" if place == "train-plain" else "zero3"
                        report = measure_training(shape, dtype, gc, options.steps, work, setting)
                        estimate = estimate_training(shape, dtype, gc, report)
                        measured, runtime = report["peak_rss"], report["rss_before_model"]
                        kind = "train"
                    else:
                        folder = work / "model"
                        save_model(shape, dtype, folder)
                        report = measure_generation(shape, dtype, folder)
                        estimate = estimate_generation(shape, dtype)
                        measured, runtime = report["peak_rss"], report["runtime"]
                        kind = "generate"
                    seconds = time.perf_counter() - started
                    rows.append((shape, dtype, place, measured, estimate.total, runtime, kind))
                    parts[f"{shape} {dtype} {place}"] = estimate.describe()
                    print(f"  {shape} {dtype} {place}: {seconds:.0f} s", flush=True)
    print_table(rows)
    print("estimates by part (GiB):")
    for name, described in parts.items():
        print(f"  {name}: {described}")


def print_table(rows: list[tuple[str, str, str, float, float, float, str]]) -> None:
    print("\nsettings (CPU; training: 2 ZeRO-3 ranks, the larger one shown):")
    for shape, case in TRAIN.items():
        print(f"  train {shape}: micro-batch {case.batch}, {case.source} + {case.target} tokens")
    for shape, gen in GENERATE.items():
        print(
            f"  generate {shape}: batch {gen.batch} x {gen.beams} beams, {gen.source} source "
            f"+ {gen.new_tokens} new tokens"
        )
    header = (
        f"{'shape':<7}{'dtype':<6}{'place':<10}{'measured GiB':>13}{'estimate GiB':>13}"
        f"{'ratio':>7}{'runtime GiB':>12}{'(constant)':>11}{'ratio w/o runtime':>18}"
    )
    print(header)
    print("-" * len(header))
    ratios = []
    for shape, dtype, place, measured, estimate, runtime, kind in rows:
        constant = CPU_RUNTIME_GIB[kind] * GIB
        model_ratio = (measured - runtime) / (estimate - constant)
        ratios.append(measured / estimate)
        print(
            f"{shape:<7}{dtype:<6}{place:<10}{measured / GIB:>13.2f}{estimate / GIB:>13.2f}"
            f"{measured / estimate:>7.2f}{runtime / GIB:>12.2f}{constant / GIB:>11.2f}"
            f"{model_ratio:>18.2f}"
        )
    inside = sum(0.75 <= r <= 1.25 for r in ratios)
    print(
        f"ratio = measured / estimate; within ±25%: {inside} of {len(ratios)}. Without "
        "runtime: (measured - measured runtime) / (estimate - the constant)."
    )


if __name__ == "__main__":
    main()
