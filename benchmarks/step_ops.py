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
it). It then counts the aten operations of one forward and backward under bf16 autocast,
with a `TorchDispatchMode`. `lora, peft casts` turns PEFT's cast of each adapter's input to
the adapter's dtype back on: autocast undoes it at the adapter's matmul, so `keep_frozen_in`
turns it off, and `lora` is what the finetune step runs.

    python benchmarks/step_ops.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import torch
from gpu_train import Shape, shapes  # benchmarks/gpu_train.py, beside this file
from torch.utils._python_dispatch import TorchDispatchMode

from llm_pipeline.config import LoraSettings
from llm_pipeline.train.lora import apply_lora, keep_frozen_in

LORA = LoraSettings(r=16, alpha=32, dropout=0.0, target_modules="all-linear")
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


def batch(seq2seq: bool) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (2, 16), generator=generator)
    if seq2seq:
        labels = torch.randint(5, VOCAB, (2, 8), generator=generator)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    return {"input_ids": ids, "labels": ids}


def step_ops(shape: Shape, setting: str) -> int:
    """Operations of one forward and backward of `shape`'s narrowed model, in `setting`."""
    torch.manual_seed(0)
    model = narrow_model(shape)
    seq2seq = shape.task == "summarization"
    if setting != "full":
        model = apply_lora(model, LORA)
        keep_frozen_in(model, torch.bfloat16)
        if setting == "lora, peft casts":
            for module in model.modules():
                if hasattr(module, "cast_input_dtype_enabled"):
                    module.cast_input_dtype_enabled = True
    inputs = batch(seq2seq)

    def forward_backward() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(**inputs).loss
        loss.backward()

    forward_backward()  # first call: lazy initialisation is not a step's work
    counter = CountOps()
    with counter:
        forward_backward()
    return counter.count


def main(argv: Sequence[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(f"{'shape':22} {'setting':22} {'ops per step':>12} {'vs full':>8}")
    for shape in shapes(tiny=False):
        full = 0
        for setting in ("full", "lora", "lora, peft casts"):
            ops = step_ops(shape, setting)
            full = full or ops
            name = f"{shape.name} layers"
            print(f"{name:22} {setting:22} {ops:12,} {ops / full:7.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
