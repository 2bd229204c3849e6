"""Operations a training step dispatches: full fine-tuning against LoRA, at the layer counts of
`gpu_train.py`'s shapes.

Why: on one H100 (2026-11-26, `gpu_train.py`, no DeepSpeed, bf16), LoRA trained T5-large
at 0.57x full fine-tuning's tokens/s, though it skips every weight gradient (a third fewer
FLOPs). A step of this size issues each of its operations from the host (PyTorch eager
dispatch, autograd and the modules' Python, tens of microseconds each). Once the host's
per-step time approaches the GPU's, the step runs at the host's pace, and every operation
an adapter adds costs time whatever its size. This script counts those operations on the
CPU: the count depends on the layer structure, not on the width, batch or device. The
widths here are tiny, so it runs in seconds.

Per setting it builds the model as the finetune step does: random weights from the
architecture, and with LoRA the project's `apply_lora` (r 16 on every linear layer) and
`keep_frozen_in` (frozen base in bf16, adapters in fp32, as a run without DeepSpeed trains
it); its batch fills no KV cache, as the finetune step's do (`train/collators.py`; the counts
before 2026-11-27 included the cache's: 336 of T5-large's full step, 251 of the Llama's). It
then counts the aten operations of one forward and backward under bf16 autocast, with a
`TorchDispatchMode`. `lora, peft casts` turns PEFT's cast of each adapter's input to the
adapter's dtype back on: autocast undoes it at the adapter's matmul, so `keep_frozen_in`
turns it off, and `lora` is what the finetune step runs.

`--time STEPS` also times whole optimizer steps (forward, backward, clipping, AdamW) of the
same narrow models on one CPU thread. Each kernel is then a few microseconds, so a step's
time is close to the host's own work: an upper bound on what the host adds to a step of the
full-width model on a GPU. On this project's 2-core machine (2026-11-26): T5-large's layers
134 ms full, 223 ms LoRA; the Llama's 52 and 86 ms.

On the H100 (2026-11-27, `gpu_train.py`, steady steps after the first, bf16, no DeepSpeed) a
T5-large step took about 0.45 s full and 0.58 s LoRA (40,911 and 31,528 tokens/s of batch
32 x 576), and the host spent 0.88 and 1.00 of those steps issuing them (`host`,
`step_host_share`): the LoRA step ran at the host's pace, the full one nearly so. That host
took about 0.40 s for full fine-tuning's operations, three times this machine's 134 ms: a
GPU machine's host (a VM, CUDA launches) can be much slower per operation than a
developer's CPU, so these CPU figures are the lower bound of a GPU step's host work, not
the upper. (The day before, 15-step windows with the warm-up in them had put LoRA at 0.57x
and suggested the host explained at most a quarter of the gap; the steady figures say it
explains all of it.) Fewer operations per step, fused ones, are the way to LoRA's speed.

Fused by hand they are not (2026-11-27, tried and not kept): PEFT's layer with one
`torch.autograd.Function` for base and adapter, the scaling folded into the rank-r product
and `addmm`, cut a step's operations from 22,084 to 15,586 (T5-large's layers) and from 9,303
to 6,700 (the Llama's; both counted with the KV cache then built), yet left the host's time
per step where it was on this machine (forward and backward at widths of 16, fp32 and under
autocast, alternated over 20 steps: within 10% of PEFT's either way). The Function's Python
forward and backward cost what the removed views, transposes and module calls did, and of the
kernels a GPU would launch it removes 2 of 16 per adapted layer and step. Compiling removes
them all: `train.compile`.

    python benchmarks/step_ops.py [--time STEPS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
from gpu_train import Shape, shapes  # benchmarks/gpu_train.py, beside this file
from torch.utils._python_dispatch import TorchDispatchMode

from llm_pipeline.config import LoraSettings
from llm_pipeline.train.lora import apply_lora, keep_frozen_in

LORA = LoraSettings(r=16, alpha=32, dropout=0.0, target_modules="all-linear")
#: What is counted: full fine-tuning, the finetune step's LoRA, and LoRA with PEFT's casts.
SETTINGS = ("full", "lora", "lora, peft casts")
VOCAB = 512


class CountOps(TorchDispatchMode):
    """Counts every aten operation dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


#: Tiny widths for each shape's model type: the operation count depends on the layers alone.
NARROW = {
    "t5": {"d_model": 64, "d_ff": 128, "num_heads": 4, "d_kv": 16},
    "llama": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
}


def narrow_model(shape: Shape) -> torch.nn.Module:
    """`shape`'s model (its layer count and layout) at a tiny width, random weights."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    settings = dict(shape.architecture)
    model_type = settings.pop("model_type")
    settings |= NARROW[model_type] | {"vocab_size": VOCAB}
    if model_type == "t5":
        settings |= {"decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}
        return AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(model_type, **settings))
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **settings))


def batch(seq2seq: bool) -> dict[str, Any]:
    """Two rows, and no KV cache, as the finetune step trains (train/collators.py)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (2, 16), generator=generator)
    if seq2seq:
        labels = torch.randint(5, VOCAB, (2, 8), generator=generator)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    else:
        inputs = {"input_ids": ids, "labels": ids}
    return {**inputs, "use_cache": False}


def built(shape: Shape, setting: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    """`shape`'s narrowed model in `setting`, as the finetune step builds it, and a batch."""
    torch.manual_seed(0)
    model = narrow_model(shape)
    if setting != "full":
        model = apply_lora(model, LORA)
        keep_frozen_in(model, torch.bfloat16)
        if setting == "lora, peft casts":
            for module in model.modules():
                if hasattr(module, "cast_input_dtype_enabled"):
                    module.cast_input_dtype_enabled = True
    return model, batch(shape.task == "summarization")


def forward_backward(model: torch.nn.Module, inputs: dict[str, Any]) -> None:
    """One forward and backward under bf16 autocast, as the finetune step runs it."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**inputs).loss
    loss.backward()


def step_ops(shape: Shape, setting: str) -> int:
    """Operations of one forward and backward of `shape`'s narrowed model, in `setting`."""
    model, inputs = built(shape, setting)
    forward_backward(model, inputs)  # first call: lazy initialisation is not a step's work
    counter = CountOps()
    with counter:
        forward_backward(model, inputs)
    return counter.count


def step_seconds(shape: Shape, setting: str, steps: int) -> float:
    """Median seconds of a whole optimizer step of `shape`'s narrowed model in `setting`
    (forward, backward, gradient clipping, AdamW), on one CPU thread: at these widths each
    kernel is a few microseconds, so this is close to the host's own work per step, an upper
    bound on what the host adds to a GPU step of the full-width model."""
    model, inputs = built(shape, setting)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-4, foreach=True)

    def step() -> None:
        forward_backward(model, inputs)
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # lazy initialisation and the optimizer's state
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--time",
        type=int,
        default=0,
        metavar="STEPS",
        help="Also time STEPS whole optimizer steps per setting on one CPU thread (the "
        "host's work per step), and print the median.",
    )
    options = parser.parse_args(argv)
    print(f"{'shape':22} {'setting':22} {'ops per step':>12} {'vs full':>8}")
    for shape in shapes(tiny=False):
        full = 0
        for setting in SETTINGS:
            ops = step_ops(shape, setting)
            full = full or ops
            name = f"{shape.name} layers"
            print(f"{name:22} {setting:22} {ops:12,} {ops / full:7.2f}x", flush=True)
    if options.time:
        torch.set_num_threads(1)
        print(f"\n{'shape':22} {'setting':22} {'host ms/step':>12} {'vs full':>8}")
        for shape in shapes(tiny=False):
            first = 0.0
            for setting in ("full", "lora"):
                seconds = step_seconds(shape, setting, options.time)
                first = first or seconds
                name = f"{shape.name} layers"
                ratio = seconds / first
                print(f"{name:22} {setting:22} {1000 * seconds:12.1f} {ratio:7.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
