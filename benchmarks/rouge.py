"""ROUGE speed: Lead-3 against reference summaries, this project vs rouge-score.

The texts are the standard library's docstring pairs by default (built offline: Lead-3 of
the document against its summary line); `--data cnndm` scores the full CNN/DailyMail test set
(Lead-3 of the article against the highlights) from the shared data folder beside the
checkout instead (benchmarks/corpus.py). Both scorers score the very same texts (Lead-3 from
`lead_k`, one sentence per line, against the reference) with stemming on. rouge-score runs
sequentially, as HF `evaluate` and most training scripts call it; this project runs with its
default workers and with one worker, each from cold stemmer caches, and its time includes the
bootstrap intervals.
The figures are ratios measured in the same run; the per-example scores must be identical.

    .venv/bin/python benchmarks/rouge.py [--samples N] [--data docstrings|cnndm]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import sys
import time

import corpus  # benchmarks/corpus.py, beside this file
import numpy as np
from rouge_score import rouge_scorer

from llm_pipeline.evaluation import ROUGE_TYPES, compute_rouge, lead_k, rougelsum_text
from llm_pipeline.evaluation.rouge import default_workers

CNNDM = corpus.SHARED_DATA / "cnn_dailymail_test" / "cnndm_test_see2017.jsonl.gz"


def load_lead3(data: str, samples: int | None) -> tuple[str, list[str], list[str]]:
    """(what is scored, Lead-3 predictions, references) for `--data`."""
    if data == corpus.DOCSTRINGS:
        rows = corpus.docstring_pairs(samples)
        leads = [lead_k(row["document"], 3) for row in rows]
        return "standard-library docstring pairs", leads, [row["summary"] for row in rows]
    with gzip.open(corpus.published(CNNDM), "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in itertools.islice(f, samples)]
    leads = [lead_k(row["article"], 3) for row in records]
    return "CNN/DailyMail test", leads, [row["reference"] for row in records]


def rouge_score_sequential(predictions: list[str], references: list[str]) -> np.ndarray:
    """F1 ×100 per example (rows) and type (columns), the way rouge-score is usually run."""
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    scores = [scorer.score(r, p) for p, r in zip(predictions, references, strict=True)]
    return np.array([[100 * s[k].fmeasure for k in ROUGE_TYPES] for s in scores])


class Timer:
    """Wall seconds, and CPU seconds of this process and its finished workers."""

    def __enter__(self) -> Timer:
        self._wall, self._cpu = time.perf_counter(), _cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall
        self.cpu = _cpu_seconds() - self._cpu


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def row(name: str, timer: Timer, n: int, means: np.ndarray) -> str:
    figures = " ".join(f"{m:9.4f}" for m in means)
    return f"{name:<31} {timer.wall:7.2f} {timer.cpu:7.2f} {n / timer.wall:7.0f} {figures}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=None, help="the first N (default: all)")
    corpus.add_data_option(parser, "cnndm")
    args = parser.parse_args()
    what, predictions, references = load_lead3(args.data, args.samples)
    n = len(predictions)
    # rouge-score reads rougeLsum sentences from newlines; give it the text ours reads.
    rs_predictions = [rougelsum_text(p) for p in predictions]
    rs_references = [rougelsum_text(r) for r in references]

    load_before = os.getloadavg()[0]
    with Timer() as t_reference:
        expected = rouge_score_sequential(rs_predictions, rs_references)
    workers = default_workers()
    with Timer() as t_ours:
        ours = compute_rouge(predictions, references, workers=workers)
    with Timer() as t_one:
        ours_one = compute_rouge(predictions, references, workers=1)
    load_after = os.getloadavg()[0]

    got = np.column_stack([ours.per_example[k] for k in ROUGE_TYPES])
    got_one = np.column_stack([ours_one.per_example[k] for k in ROUGE_TYPES])
    identical = np.array_equal(got, expected) and np.array_equal(got_one, expected)
    means_identical = all(
        ours.scores[k] == float(np.mean(expected[:, i])) for i, k in enumerate(ROUGE_TYPES)
    )

    print(f"ROUGE F1 x100, {what}, Lead-3 vs reference: {n} documents, stemming on")
    header = " ".join(f"{k:>9}" for k in ROUGE_TYPES)
    print(f"{'scorer':<31} {'wall s':>7} {'cpu s':>7} {'docs/s':>7} {header}")
    print(row("rouge-score 0.1.2, sequential", t_reference, n, expected.mean(axis=0)))
    print(row(f"llm_pipeline, {workers} workers", t_ours, n, got.mean(axis=0)))
    print(row("llm_pipeline, 1 worker", t_one, n, got_one.mean(axis=0)))
    # CPU clocks tick every 10 ms: a few dozen short texts can take less than one tick.
    per_core = f"{t_reference.cpu / t_one.cpu:.1f}x" if t_one.cpu else "too short to time"
    print(
        f"speed-up vs sequential rouge-score (wall): {t_reference.wall / t_ours.wall:.1f}x "
        f"({workers} workers), {t_reference.wall / t_one.wall:.1f}x (1 worker); "
        f"per core (cpu): {per_core}"
    )
    print(
        f"per-example scores identical to rouge-score: {'yes' if identical else 'NO'} "
        f"({n} x {len(ROUGE_TYPES)}); means identical: {'yes' if means_identical else 'NO'}"
    )
    lows_highs = ", ".join(
        f"{k} [{ours.intervals[k][0]:.2f}, {ours.intervals[k][1]:.2f}]" for k in ROUGE_TYPES
    )
    print(f"95% bootstrap intervals ({ours.n_resamples} resamples): {lows_highs}")
    print(
        f"{os.cpu_count()} CPUs; 1-minute load average {load_before:.1f} before, "
        f"{load_after:.1f} after (other work on the machine slows every row)"
    )
    return 0 if identical and means_identical else 1


if __name__ == "__main__":
    sys.exit(main())
