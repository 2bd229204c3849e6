"""The fit check's causal-LM estimates against peak memory measured on this machine's CPU.

`benchmarks/fit.py` calibrates the seq2seq (T5) estimates; this does the same for the
decoder-only layouts `fit/decoder_only.py` counts: a Llama-shaped and an OPT-shaped model
with random weights (8 layers, hidden 512: small enough for a run of seconds on 2 cores).
Each run is a fresh process, so that its peak resident memory (VmHWM) is its own:

* train: the Hugging Face Trainer in one process (no DeepSpeed), as a one-process local run
  trains, 2 steps on padded batches, with the finetune step's causal loss (shifted, summed in
  fp32 over the label tokens) as its `compute_loss_func`; `--lora` puts PEFT's adapters
  (r 16 on every linear layer, dropout 0.05, `autocast_adapter_dtype=False` as
  `train/lora.py` does) on it first;
* generate: greedy or beam search from left-padded prompts, after a warm-up on a tiny model.

Beside each peak: the estimate `llm_pipeline.fit` makes for the same settings (the functions
the fit check calls, device "cpu"), and measured / estimate, with and without each process's
runtime (RSS before the model, or after the warm-up), as in `benchmarks/fit.py`.

    .venv/bin/python benchmarks/fit_causal.py [--layouts llama,opt]
        [--places train,train-lora,generate] [--dtypes fp32]

Training runs fp32 only (the plain Trainer keeps fp32 weights whatever its autocast does);
generation takes `--dtypes fp32,bf16`. About 3 minutes for the defaults on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import memory  # benchmarks/memory.py, beside this file

from llm_pipeline.config import LoraSettings
from llm_pipeline.fit.estimates import generation_memory
from llm_pipeline.fit.memory import CPU_RUNTIME_GIB, GIB, Breakdown, Lengths
from llm_pipeline.fit.shapes import shape_of
from llm_pipeline.fit.states import training_memory
from llm_pipeline.tasks.kinds import CAUSAL_LM

LAYOUTS: dict[str, dict[str, Any]] = {
    "llama": {
        "model_type": "llama",
        "hidden_size": 512,
        "intermediate_size": 1408,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "num_hidden_layers": 8,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
    "opt": {
        "model_type": "opt",
        "hidden_size": 512,
        "ffn_dim": 2048,
        "num_attention_heads": 8,
        "num_hidden_layers": 8,
        "vocab_size": 50272,
        "word_embed_proj_dim": 512,
        "max_position_embeddings": 2048,
        "dropout": 0.1,
    },
}
LORA = LoraSettings(r=16, alpha=32, dropout=0.05, target_modules="all-linear")


@dataclass(frozen=True)
class TrainCase:
    batch: int
    length: int


@dataclass(frozen=True)
class GenerateCase:
    batch: int
    beams: int
    prompt: int
    new_tokens: int


TRAIN = TrainCase(batch=8, length=256)
GENERATE = GenerateCase(batch=8, beams=4, prompt=256, new_tokens=32)


def transformers_config(layout: str) -> Any:
    from transformers import AutoConfig

    settings = dict(LAYOUTS[layout])
    return AutoConfig.for_model(settings.pop("model_type"), attn_implementation="sdpa", **settings)


def _padded_batch(rows: int, length: int, seed: int) -> tuple[Any, Any]:
    """Random token ids with every other row a quarter shorter (its mask 0 there)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 30000, (rows, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[::2, -length // 4 :] = 0
    return ids, mask


def train_worker(options: argparse.Namespace) -> dict[str, Any]:
    """One process training 2 steps; its runtime RSS and peak."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, set_seed

    def causal_loss(outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
        logits, labels = outputs["logits"][:, :-1], labels[:, 1:]
        total = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="sum"
        )
        return total / (labels != -100).sum()

    runtime = memory._current_rss()
    set_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(options.layout))
    if options.lora:
        from peft import LoraConfig, get_peft_model

        adapters = LoraConfig(
            r=LORA.r,
            lora_alpha=int(LORA.alpha),
            lora_dropout=LORA.dropout,
            target_modules=LORA.target_modules,
        )
        model = get_peft_model(model, adapters, autocast_adapter_dtype=False)
    ids, mask = _padded_batch(2 * TRAIN.batch, TRAIN.length, seed=0)
    labels = ids.masked_fill(mask == 0, -100)
    data = Dataset.from_dict(
        {"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "labels": labels.tolist()}
    )
    args = TrainingArguments(
        output_dir=options.work,
        per_device_train_batch_size=TRAIN.batch,
        max_steps=2,
        learning_rate=1e-4,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=args, train_dataset=data, compute_loss_func=causal_loss).train()
    return {"runtime": runtime, "peak_rss": memory.peak_rss()}


def generate_worker(options: argparse.Namespace) -> dict[str, Any]:
    """One process generating once after a warm-up; its RSS after the warm-up and peak."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[options.dtype])
    tiny = transformers_config(options.layout)
    tiny.update({"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2})
    tiny.update({"num_key_value_heads": 2})
    tiny.update({"intermediate_size": 32, "ffn_dim": 32, "word_embed_proj_dim": 16})
    warm = AutoModelForCausalLM.from_config(tiny).to(dtype).eval()
    ids, mask = _padded_batch(2, 8, seed=1)
    with torch.no_grad():
        warm.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, num_beams=2)
    del warm
    runtime = memory._current_rss()
    model = AutoModelForCausalLM.from_config(transformers_config(options.layout))
    model = model.to(dtype).eval()
    ids, mask = _padded_batch(GENERATE.batch, GENERATE.prompt, seed=2)
    left = torch.stack(
        [torch.roll(row, int((m == 0).sum())) for row, m in zip(ids, mask, strict=True)]
    )
    left_mask = torch.stack([torch.roll(m, int((m == 0).sum())) for m in mask])
    with torch.no_grad():
        model.generate(
            input_ids=left,
            attention_mask=left_mask,
            num_beams=GENERATE.beams,
            do_sample=False,
            max_new_tokens=GENERATE.new_tokens,
            min_new_tokens=GENERATE.new_tokens,
            pad_token_id=1,
        )
    return {"runtime": runtime, "peak_rss": memory.peak_rss()}


def measure(place: str, layout: str, dtype: str, work: Path) -> dict[str, Any]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=memory.FIXED_MMAP_THRESHOLD)
    command = [sys.executable, __file__, "--worker", place, "--layout", layout]
    command += ["--dtype", dtype, "--work", str(work)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{place} {layout} {dtype} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def estimate(place: str, layout: str, dtype: str) -> Breakdown:
    lora = LORA if place == "train-lora" else None
    shape = shape_of(transformers_config(layout), name=layout, kind=CAUSAL_LM, lora=lora)
    if place.startswith("train"):
        breakdown, _ = training_memory(
            shape,
            lengths=Lengths(TRAIN.batch, TRAIN.length, 0),
            dtype=dtype,
            device="cpu",
            checkpointing=False,
            zero=None,
            processes_per_node=1,
            nodes=1,
        )
        return breakdown
    return generation_memory(
        shape,
        batch=GENERATE.batch,
        beams=GENERATE.beams,
        source=GENERATE.prompt,
        new_tokens=GENERATE.new_tokens,
        dtype=dtype,
        device="cpu",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", default="llama,opt")
    parser.add_argument("--places", default="train,train-lora,generate")
    parser.add_argument("--dtypes", default="fp32")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--layout", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        options.lora = options.worker == "train-lora"
        run = generate_worker if options.worker == "generate" else train_worker
        print(json.dumps(run(options)))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fit-causal-") as tmp:
        for layout in options.layouts.split(","):
            for place in options.places.split(","):
                dtypes = options.dtypes.split(",") if place == "generate" else ["fp32"]
                for dtype in dtypes:
                    work = Path(tmp) / f"{layout}-{place}-{dtype}"
                    report = measure(place, layout, dtype, work)
                    guess = estimate(place, layout, dtype)
                    rows.append((layout, place, dtype, report, guess))
                    print(
                        f"  {layout} {place} {dtype}: measured {report['peak_rss'] / GIB:.2f} "
                        f"(runtime {report['runtime'] / GIB:.2f}), estimate {guess.describe()}",
                        flush=True,
                    )
    print_table(rows)


def print_table(rows: list[tuple[str, str, str, dict[str, Any], Breakdown]]) -> None:
    print(
        f"\nsettings (CPU, one process): train micro-batch {TRAIN.batch} x {TRAIN.length} "
        f"tokens, 2 steps; generate batch {GENERATE.batch} x {GENERATE.beams} beams, "
        f"{GENERATE.prompt} prompt + {GENERATE.new_tokens} new tokens"
    )
    header = (
        f"{'layout':<7}{'place':<11}{'dtype':<6}{'measured GiB':>13}{'estimate GiB':>13}"
        f"{'ratio':>7}{'runtime GiB':>12}{'ratio w/o runtime':>18}"
    )
    print(header)
    print("-" * len(header))
    for layout, place, dtype, report, guess in rows:
        kind = "generate" if place == "generate" else "train"
        measured, runtime = report["peak_rss"], report["runtime"]
        constant = CPU_RUNTIME_GIB[kind] * GIB
        print(
            f"{layout:<7}{place:<11}{dtype:<6}{measured / GIB:>13.2f}{guess.total / GIB:>13.2f}"
            f"{measured / guess.total:>7.2f}{runtime / GIB:>12.2f}"
            f"{(measured - runtime) / (guess.total - constant):>18.2f}"
        )
    print(
        "ratio = measured / estimate; without runtime: (measured - runtime) / (estimate - "
        "the constant)."
    )


if __name__ == "__main__":
    main()
