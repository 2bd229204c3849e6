"""What `train.compile: blocks` saves at start-up, against compiling the whole model, on this
machine: each of a deep Llama and a T5 trained eagerly, compiled whole and compiled block by
block, full fine-tuning and LoRA, through the finetune step's own `run_finetune`.

Why: compiling the whole 1.1B Llama with LoRA was still running after 123 s on an H100, past
the benchmark's budget, and a run pays it again for each new batch shape until torch marks
the lengths dynamic. Compiling each repeated block once for all its copies (accelerate's
regional compilation) should cut that to about one block's worth. Each setting prints

- `warm-up s`: the steps up to the last one that compiled (`warm`: how many; the first
  step where nothing compiled again), compilation included (the run's time less the steady
  time after them, as the step's metrics give both), each run with an empty cache of
  compiled kernels, as a new machine starts. Measured before 2026-11-27's change to the
  finetune metrics' steady window (`counts.Clock`), the figures below took the first step
  alone as warm-up: the same for every setting that compiled only there, and a T5 compiled
  whole, which compiled again at every step, now reads all its steps as warm-up and no
  steady step;
- `step ms`: a steady step after them;
- both as ratios to the same shape trained eagerly in the same run, and the final training
  loss beside the eager one (the same seed, data and order: compiling must not change what
  is learnt beyond float rounding).

The shapes are TinyLlama's depth (22 layers) and a T5 of 8 + 8 blocks, narrow enough for a
2-core CPU (fp32, one process, the plain Trainer, batch 2 of 128 tokens). Steady CPU step
times say nothing of a GPU's, where compiling is for fewer kernel launches: only the
compile-time ratios carry over, roughly. `gpu_train.py`'s `compile` rows measure a GPU.

Measured on this project's 2-core CPU (2026-11-27, `--steps 6`, nothing else running):

    (printed as llama-1.1b and t5-large then, gpu_train's names; renamed since)
    setting                     first step s  x eager  step ms  x eager
    llama full compiled whole           42.3            405     0.96
    llama full by blocks                16.7            348     0.82
    llama lora compiled whole           60.8            376     1.15
    llama lora by blocks                20.8            345     1.06
    t5 full compiled whole              45.6           8833   163
    t5 full by blocks                   44.0             51     0.94
    t5 lora compiled whole              43.7           8769   126
    t5 lora by blocks                   33.6             65     0.94

Every compiled run ended on eager's loss to four decimals. By blocks the Llama's first step
compiled in 0.39x (full) and 0.34x (LoRA) the time of the whole model. The T5 compiled whole
recompiled at every step of the six (a new batch length each, with gradient checkpointing's
wrappers among the recompiled frames), 126-163x an eager step; by blocks its steps ran at
0.94x eager's time, and its first step compiled in about the same time (each stack's first
block, which makes the position bias, is a graph of its own).

Since then, batches of many lengths are traced dynamic from the first compile
(`train/trainer.py::FinetuneTrainer._build_accelerator_args`): with eager attention, as a
T5 trains on a GPU, its decoder blocks compiled again at step 2, and on one H200 a T5-large
by blocks spent about 113 s in its first five steps. The T5 rows again (2026-11-27,
`--only t5 --steps 6`, nothing else running; `warm`: the steps up to the last that
compiled):

    setting                          warm-up s  warm  step ms  x eager     loss eager loss
    t5-8+8-d64 full eager                  0.0     1       50     1.00  10.6620    10.6620
    t5-8+8-d64 full compile (whole)      135.9     2       51     1.03  10.6620    10.6620
    t5-8+8-d64 full compile: blocks       45.5     1       49     0.98  10.6620    10.6620
    t5-8+8-d64 lora eager                  0.1     1       66     1.00  10.9062    10.9062
    t5-8+8-d64 lora compile (whole)      127.6     2       64     0.98  10.9062    10.9062
    t5-8+8-d64 lora compile: blocks       43.1     1       67     1.02  10.9062    10.9062

The T5 compiled whole no longer recompiles at every step (eager's pace after two steps,
where it was 126-163x), but compiles about three times as long as by blocks, which stays
the way to compile a T5.

`--again` runs each compiled setting a second time on the kernels the first left, as a
later run on the same machine finds them in the project's cache folder (`caches.py`; before
it, a local run's private TMPDIR took torch's default cache away with the run). Measured
(2026-11-27, `--only llama --again --steps 6`, nothing else running), the first step:

    setting                       cold s   again s
    llama full compiled whole       38.9      15.0   (0.39x)
    llama full by blocks            17.1       3.1   (0.18x)
    llama lora compiled whole       53.0      22.4   (0.42x)
    llama lora by blocks            18.5       3.2   (0.17x)

    .venv/bin/python benchmarks/compile_blocks.py [--steps 6] [--only llama] [--again]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import gpu_train  # benchmarks/gpu_train.py, beside this file

from llm_pipeline import caches
from llm_pipeline.config import TrainConfig
from llm_pipeline.train.job import run_finetune

MODES: tuple[bool | str, ...] = (False, True, "blocks")


def cpu_shapes() -> tuple[gpu_train.Shape, gpu_train.Shape]:
    """gpu_train's tiny shapes, made deep (where regional compilation has copies to reuse),
    and named for what they are."""
    t5, llama = gpu_train.shapes(tiny=True)
    t5 = replace(
        t5,
        name="t5-8+8-d64",
        architecture={**t5.architecture, "num_layers": 8, "num_decoder_layers": 8},
        source=128,
        target=32,
    )
    llama = replace(
        llama,
        name="llama-22x256",
        architecture={
            **llama.architecture,
            "hidden_size": 256,
            "intermediate_size": 704,
            "num_hidden_layers": 22,
        },
    )
    return t5, llama


def train_config(lora: bool, compile_mode: bool | str, steps: int) -> TrainConfig:
    return TrainConfig(
        max_steps=steps,
        per_device_batch_size=2,
        learning_rate=1e-4,
        lr_scheduler="constant",
        warmup_steps=0,
        logging_steps=1,
        eval_steps=100 * steps,
        save_steps=100 * steps,
        precision="fp32",
        zero_stage=0,
        lora=gpu_train.LORA if lora else None,
        compile=compile_mode,
    )


def timed_run(
    shape: gpu_train.Shape,
    dataset: Path,
    folder: Path,
    train: TrainConfig,
    *,
    kernels: Path | None = None,
) -> dict[str, Any]:
    """One run_finetune; its first-step and steady-step seconds and final loss. Compiled
    kernels are kept in `kernels` (default: a new, empty folder of the run's own)."""
    started = time.perf_counter()
    result = run_finetune(
        dataset_dir=str(dataset),
        output_dir=str(folder / "model"),
        model=gpu_train.model_config(shape),
        train=train,
        cluster=gpu_train.CLUSTER,
        task=shape.task,
        # A cache of compiled kernels of its own, empty: compiled cold, as a pipeline step's
        # new machine compiles (a run keeps them in the project's cache folder, caches.py).
        env={**os.environ, caches.INDUCTOR_ENV_VAR: str(kernels or folder / "inductor-cache")},
    )
    metrics = result.metrics
    steps = int(metrics["global_step"])
    tokens = float(metrics["train_tokens"])
    runtime = tokens / float(metrics["train_tokens_per_second"])
    # The finetune metrics' steady window starts after the last step that compiled; where
    # every step compiled (a T5 compiled whole, at a new batch length each) there is none.
    steady_rate = metrics.get("train_steady_tokens_per_second")
    warm = int(metrics.get("train_warm_up_steps") or steps)
    steady = tokens * (steps - warm) / steps / float(steady_rate) if steady_rate else 0.0
    losses = [entry["loss"] for entry in result.log_history if "loss" in entry]
    return {
        "first_step_s": runtime - steady,
        "warm_up_steps": warm,
        "step_s": steady / (steps - warm) if steady_rate else None,
        "loss": losses[-1],
        "elapsed_s": time.perf_counter() - started,
    }


def mode_name(mode: bool | str) -> str:
    return {False: "eager", True: "compile (whole model)"}.get(mode, f"compile: {mode}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per setting")
    parser.add_argument("--only", choices=("t5", "llama"), help="one shape")
    parser.add_argument(
        "--again",
        action="store_true",
        help="run each compiled setting a second time on the first's kernels, as a later run "
        "on the same machine does (`again s`: its first step)",
    )
    args = parser.parse_args(argv)
    t5, llama = cpu_shapes()
    chosen = [s for s in (llama, t5) if args.only is None or s.name.startswith(args.only)]
    print(
        f"{'setting':<36} {'warm-up s':>12} {'x eager':>8} {'warm':>5} {'step ms':>8} "
        f"{'x eager':>8} "
        f"{'loss':>8} {'eager loss':>10}" + (f" {'again s':>8}" if args.again else "")
    )
    with tempfile.TemporaryDirectory(prefix="compile-blocks-") as work:
        folder = Path(work)
        settings = [
            gpu_train.Setting(shape, 0, packed=None if shape is t5 else False) for shape in chosen
        ]
        data = gpu_train.prepare_data(folder, t5, llama, settings, tiny=True)
        for shape in chosen:
            dataset = data[shape.name if shape is t5 else f"{shape.name} unpacked"]
            for lora in (False, True):
                eager: dict[str, Any] = {}
                for mode in MODES:
                    name = f"{shape.name} {'lora' if lora else 'full'} {mode_name(mode)}"
                    where = folder / name.replace(" ", "-").replace(":", "")
                    train = train_config(lora, mode, args.steps)
                    run = timed_run(shape, dataset, where, train)
                    eager = eager or run
                    again = ""
                    if args.again and mode:
                        kernels = where / "inductor-cache"
                        rerun = timed_run(shape, dataset, where / "again", train, kernels=kernels)
                        again = f" {rerun['first_step_s']:>8.1f}"
                    step = run["step_s"]
                    steady = (
                        f"{1000 * step:>8.0f} {step / eager['step_s']:>8.2f}"
                        if step is not None and eager["step_s"]
                        else f"{'-':>8} {'-':>8}"
                    )
                    print(
                        f"{name:<36} {run['first_step_s']:>12.1f} "
                        f"{run['first_step_s'] / eager['first_step_s']:>8.2f} "
                        f"{run['warm_up_steps']:>5} {steady} "
                        f"{run['loss']:>8.4f} {eager['loss']:>10.4f}{again}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
