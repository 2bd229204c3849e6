"""DPO's reference without a second model: what each way costs, against an epoch of training
measured in the same run on the same model and pairs.

- Full fine-tuning takes the reference log-probs in one pass before the first step
  (tasks/preference_tuning/reference.py): printed, that pass's time as a share of one
  training epoch (a forward of every pair, no backward: about a third in theory).
- LoRA takes them each step from the model with its adapters off: printed, a LoRA epoch's
  time with that extra forward against the same epoch reading precomputed columns.
- Memory: the weights a second (reference) model would hold, against the precomputed
  columns (two float32 per pair) and LoRA's nothing.

The loss is the finetune step's (`training.DpoLoss`), AdamW in fp32 on the CPU, one process,
no DeepSpeed; a random Llama and random token ids (nothing is read).

Run: .venv/bin/python benchmarks/dpo_reference.py [--pairs 64] [--batch 8] [--length 128]
     [--hidden 256] [--layers 4] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import datasets
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from llm_pipeline.tasks.preference_tuning.collate import REFERENCE_COLUMNS, PairCollator
from llm_pipeline.tasks.preference_tuning.reference import precompute_reference_logps
from llm_pipeline.tasks.preference_tuning.training import DpoLoss

VOCAB = 1000
COLLATE = PairCollator(pad_id=0)


def pairs(count: int, length: int) -> datasets.Dataset:
    """Random pairs: a prompt of half the length, two answers of a quarter each."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(count):
        prompt = torch.randint(1, VOCAB, (length // 2,), generator=generator).tolist()
        row: dict[str, Any] = {}
        for answer in ("chosen", "rejected"):
            ids = torch.randint(1, VOCAB, (length // 4,), generator=generator).tolist()
            row[f"{answer}_input_ids"] = prompt + ids
            row[f"{answer}_attention_mask"] = [1] * (len(prompt) + len(ids))
            row[f"{answer}_labels"] = [-100] * len(prompt) + ids
        rows.append(row)
    return datasets.Dataset.from_list(rows)


def model(hidden: int, layers: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        max_position_embeddings=4096,
    )
    return LlamaForCausalLM(config)


def epoch(policy: torch.nn.Module, data: datasets.Dataset, batch: int) -> float:
    """Seconds for one epoch of DPO steps over `data`."""
    loss_of = DpoLoss(beta=0.1, loss_type="sigmoid")
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-5)
    policy.train()
    start = time.perf_counter()
    for first in range(0, len(data), batch):
        inputs = COLLATE(list(data.select(range(first, min(first + batch, len(data))))))
        loss, _ = loss_of(policy, inputs, unwrapped=policy)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return time.perf_counter() - start


def median(run: Callable[[], float], repeats: int) -> float:
    """The median of `repeats` runs after one warm-up run (thread pools, allocator)."""
    run()
    return statistics.median(run() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8, help="Pairs per step.")
    parser.add_argument("--length", type=int, default=128, help="Tokens of a prompt+answer.")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    options = parser.parse_args()
    data = pairs(options.pairs, options.length)
    base = model(options.hidden, options.layers)

    def reference_pass() -> float:
        start = time.perf_counter()
        precompute_reference_logps(base, data, COLLATE, batch_size=options.batch)
        return time.perf_counter() - start

    with_columns = precompute_reference_logps(base, data, COLLATE, batch_size=options.batch)
    full = median(
        lambda: epoch(model(options.hidden, options.layers), with_columns, options.batch),
        options.repeats,
    )
    reference = median(reference_pass, options.repeats)

    def lora(data_: datasets.Dataset) -> float:
        adapted = get_peft_model(
            model(options.hidden, options.layers), LoraConfig(r=16, target_modules="all-linear")
        )
        return epoch(adapted, data_, options.batch)

    lora_columns = median(lambda: lora(with_columns), options.repeats)
    lora_off = median(lambda: lora(data), options.repeats)
    weights = sum(p.numel() * p.element_size() for p in base.parameters())
    print(
        f"{options.pairs} pairs of {options.length} tokens, {options.batch} a step, "
        f"Llama {options.hidden}x{options.layers} ({weights / 2**20:.1f} MiB fp32), CPU"
    )
    print(f"full epoch (precomputed reference)   {full:8.2f} s  1.00")
    print(f"reference pass, once before training {reference:8.2f} s  {reference / full:.2f}")
    print(f"LoRA epoch, precomputed reference    {lora_columns:8.2f} s  1.00")
    print(f"LoRA epoch, adapters-off reference   {lora_off:8.2f} s  {lora_off / lora_columns:.2f}")
    columns = options.pairs * len(REFERENCE_COLUMNS) * 4
    print(
        f"memory: a second model {weights / 2**20:.1f} MiB; precomputed columns "
        f"{columns / 2**10:.1f} KiB ({len(REFERENCE_COLUMNS) * 4} bytes a pair); LoRA none"
    )


if __name__ == "__main__":
    main()
