"""ROUGE F1 with exactly the definitions of `rouge-score` 0.1.2, computed several times faster.

Published summarization results are rouge-score numbers (HF `evaluate`, T5, BART), so this
module must reproduce them to the last bit; it only computes them faster:

* the tokenizer is rouge-score's (same regular expressions, same nltk Porter stemmer, only
  tokens longer than 3 characters stemmed), but each distinct word is stemmed once per
  process instead of on every occurrence;
* each text is tokenized once per example and the tokens serve all four metrics;
* longest common subsequences use a bit-parallel table (one big-int row per reference
  token), and rougeLsum reads out the very LCS that rouge-score's backtrack picks, since
  which one it picks changes the summary-level score;
* examples are scored in worker processes, in chunks.

rougeLsum needs one sentence per line. A text that contains a newline is taken as already
split (CNN/DailyMail highlights, model outputs post-processed the HF way); a text without
one is split by `sentences.split_sentences` (see `rougelsum_text`). Sentences are cut only at
whitespace, so rouge1/2/L are the same for the text before and after splitting.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rouge_score.scoring import fmeasure
from rouge_score.tokenize import NON_ALPHANUM_RE, VALID_TOKEN_RE

from llm_pipeline.evaluation.bootstrap import bootstrap_interval
from llm_pipeline.evaluation.sentences import split_sentences

if TYPE_CHECKING:
    from nltk.stem.porter import PorterStemmer

__all__ = [
    "ROUGE_TYPES",
    "RougeResult",
    "bootstrap_interval",
    "compute_rouge",
    "default_workers",
    "rougelsum_text",
]

ROUGE_TYPES: tuple[str, ...] = ("rouge1", "rouge2", "rougeL", "rougeLsum")

# Below this many examples, starting worker processes costs more than it saves.
_MIN_PARALLEL = 64
# Caps memory if someone scores an endless stream of distinct junk words.
_STEM_CACHE_LIMIT = 2_000_000
_STEM_CACHE: dict[str, str] = {}
# One example: F1 (0..1) of each type in ROUGE_TYPES order, then prediction and reference
# token counts.
Row = tuple[float, float, float, float, int, int]


@functools.cache
def _stemmer() -> PorterStemmer:
    """The stemmer rouge-score's DefaultTokenizer builds, made on first use: importing nltk
    takes seconds (scipy, sklearn), which a process that imports this module without scoring
    (the deploy step, through llm_pipeline.evaluation) should not wait for."""
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer()


@dataclass(frozen=True)
class RougeResult:
    """ROUGE F1 ×100: means, bootstrap intervals and per-example scores (input order)."""

    scores: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    per_example: dict[str, np.ndarray]
    mean_prediction_tokens: float
    mean_reference_tokens: float
    confidence: float
    n_resamples: int

    @property
    def n_examples(self) -> int:
        return len(self.per_example[ROUGE_TYPES[0]])


def rougelsum_text(text: str) -> str:
    """The text as rougeLsum reads it: one sentence per line.

    Text with a newline is returned unchanged (taken as already split); other text is split
    with `split_sentences` and joined with newlines.
    """
    return text if "\n" in text else "\n".join(split_sentences(text))


def compute_rouge(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    use_stemmer: bool = True,
    workers: int | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> RougeResult:
    """Score predictions against references (one reference each) as rouge-score does.

    Per example this equals `RougeScorer(ROUGE_TYPES, use_stemmer).score(rougelsum_text(ref),
    rougelsum_text(pred))`; `scores` are the means. `workers` defaults to the CPUs this
    process may use; 1 scores in this process. Workers start with multiprocessing's default
    method, so under spawn (macOS, Windows) call this from behind `if __name__ == "__main__"`.
    Intervals are percentile bootstraps of the mean with `n_resamples` resamples.
    """
    _check_inputs(predictions, references)
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    rows = np.asarray(_score_all(list(predictions), list(references), use_stemmer, workers))
    values = 100 * rows[:, : len(ROUGE_TYPES)]
    # Contiguous columns: np.mean then sums them exactly as it sums any list of scores.
    per_example = {k: np.ascontiguousarray(values[:, i]) for i, k in enumerate(ROUGE_TYPES)}
    low, high = bootstrap_interval(
        values, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    return RougeResult(
        scores={k: float(np.mean(v)) for k, v in per_example.items()},
        intervals={k: (float(low[i]), float(high[i])) for i, k in enumerate(ROUGE_TYPES)},
        per_example=per_example,
        mean_prediction_tokens=float(np.mean(rows[:, -2])),
        mean_reference_tokens=float(np.mean(rows[:, -1])),
        confidence=confidence,
        n_resamples=n_resamples,
    )


def _check_inputs(predictions: Sequence[str], references: Sequence[str]) -> None:
    if len(predictions) != len(references):
        raise ValueError(
            f"predictions and references differ in length: {len(predictions)} predictions, "
            f"{len(references)} references"
        )
    if not predictions:
        raise ValueError("predictions and references are empty: nothing to score")
    for name, texts in (("predictions", predictions), ("references", references)):
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"{name}[{i}] must be a str, got {type(text).__name__}")


def default_workers() -> int:
    """The CPUs this process may run on: what `compute_rouge` uses unless told otherwise."""
    # The affinity mask is what a container or taskset really grants; cpu_count is the host.
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _score_all(
    predictions: list[str], references: list[str], use_stemmer: bool, workers: int
) -> list[Row]:
    n = len(predictions)
    if workers == 1 or n < _MIN_PARALLEL:
        return _score_chunk((predictions, references, use_stemmer))
    # Several chunks per worker even out uneven lengths; each chunk is one small message.
    size = max(16, min(512, math.ceil(n / (workers * 8))))
    chunks = [
        (predictions[i : i + size], references[i : i + size], use_stemmer)
        for i in range(0, n, size)
    ]
    with multiprocessing.get_context().Pool(min(workers, len(chunks))) as pool:
        return [row for rows in pool.map(_score_chunk, chunks, chunksize=1) for row in rows]


def _score_chunk(chunk: tuple[list[str], list[str], bool]) -> list[Row]:
    predictions, references, use_stemmer = chunk
    return [_score_example(p, r, use_stemmer) for p, r in zip(predictions, references, strict=True)]


def _score_example(prediction: str, reference: str, use_stemmer: bool) -> Row:
    """F1 of rouge1, rouge2, rougeL, rougeLsum (0..1), then both token counts."""
    pred_sents = _sentence_tokens(prediction, use_stemmer)
    ref_sents = _sentence_tokens(reference, use_stemmer)
    pred = [tok for sent in pred_sents for tok in sent]
    ref = [tok for sent in ref_sents for tok in sent]
    return (
        _ngram_f1(ref, pred, 1),
        _ngram_f1(ref, pred, 2),
        _lcs_f1(ref, pred),
        _summary_lcs_f1(ref_sents, pred_sents),
        len(pred),
        len(ref),
    )


def _sentence_tokens(text: str, use_stemmer: bool) -> list[list[str]]:
    # rouge-score drops empty lines; lines without tokens contribute nothing either way.
    lines = (_tokenize(line, use_stemmer) for line in rougelsum_text(text).split("\n"))
    return [tokens for tokens in lines if tokens]


def _tokenize(text: str, use_stemmer: bool) -> list[str]:
    """rouge_score.tokenize.tokenize, with the stemmer memoised per word."""
    # After the substitution only [a-z0-9] and spaces remain, so str.split() yields exactly
    # rouge-score's non-empty tokens.
    words = NON_ALPHANUM_RE.sub(" ", text.lower()).split()
    if not use_stemmer:
        return words
    cache = _STEM_CACHE
    tokens = []
    for word in words:
        stem = cache.get(word)
        if stem is None:
            stem = _stem(word)
        if stem:
            tokens.append(stem)
    return tokens


def _stem(word: str) -> str:
    """The stemmed token for `word`, or "" where rouge-score would drop it."""
    stem = _stemmer().stem(word) if len(word) > 3 else word
    stem = stem if VALID_TOKEN_RE.match(stem) else ""
    if len(_STEM_CACHE) >= _STEM_CACHE_LIMIT:
        _STEM_CACHE.clear()
    _STEM_CACHE[word] = stem
    return stem


def _ngram_f1(ref: list[str], pred: list[str], n: int) -> float:
    ref_grams, pred_grams = _ngrams(ref, n), _ngrams(pred, n)
    overlap = sum((ref_grams & pred_grams).values())
    # Same divisions in the same order as rouge_score._score_ngrams: identical floats.
    precision = overlap / max(sum(pred_grams.values()), 1)
    recall = overlap / max(sum(ref_grams.values()), 1)
    return float(fmeasure(precision, recall))


def _ngrams(tokens: list[str], n: int) -> Counter[Hashable]:
    if n == 1:
        return Counter(tokens)
    return Counter(zip(*(tokens[i:] for i in range(n)), strict=False))


def _lcs_f1(ref: list[str], pred: list[str]) -> float:
    if not ref or not pred:
        return 0.0
    matches = _positions(pred)
    full = (1 << len(pred)) - 1
    row = full
    for tok in ref:
        # Bit-parallel LCS row update (Hyyrö 2004); see _lcs_rows.
        low = row & matches.get(tok, 0)
        row = ((row + low) | (row - low)) & full
    lcs = len(pred) - row.bit_count()
    return float(fmeasure(lcs / len(pred), lcs / len(ref)))


def _summary_lcs_f1(ref_sents: list[list[str]], pred_sents: list[list[str]]) -> float:
    """rouge_score._summary_level_lcs: union LCS per reference sentence, no double counts."""
    if not ref_sents or not pred_sents:
        return 0.0
    ref_left = Counter(tok for sent in ref_sents for tok in sent)
    pred_left = Counter(tok for sent in pred_sents for tok in sent)
    m, n = sum(ref_left.values()), sum(pred_left.values())
    pred_matches = [_positions(sent) for sent in pred_sents]
    hits = 0
    for ref in ref_sents:
        union: set[int] = set()
        for pred, matches in zip(pred_sents, pred_matches, strict=True):
            union.update(_lcs_indices(ref, pred, matches))
        for i in sorted(union):
            tok = ref[i]
            if pred_left[tok] > 0 and ref_left[tok] > 0:
                hits += 1
                pred_left[tok] -= 1
                ref_left[tok] -= 1
    return float(fmeasure(hits / n, hits / m))


def _positions(tokens: list[str]) -> dict[str, int]:
    """For each token, a bit mask of the positions where it occurs."""
    masks: dict[str, int] = {}
    for j, tok in enumerate(tokens):
        masks[tok] = masks.get(tok, 0) | (1 << j)
    return masks


def _lcs_rows(ref: list[str], width: int, matches: dict[str, int]) -> list[int]:
    """Every row of the LCS table of `ref` against a text of `width` tokens, bit-parallel.

    Hyyrö (2004): bit j of row i is 0 where the LCS length grows between columns j and
    j + 1, so table[i][j] = j - popcount(row_i & (2**j - 1)). One big-int step per
    reference token replaces a Python loop over every cell.
    """
    full = (1 << width) - 1
    row = full
    rows = [row]
    for tok in ref:
        low = row & matches.get(tok, 0)
        row = ((row + low) | (row - low)) & full
        rows.append(row)
    return rows


def _lcs_indices(ref: list[str], pred: list[str], matches: dict[str, int]) -> list[int]:
    """The reference indices of the LCS that rouge_score.lcs_ind's backtrack returns."""
    width = len(pred)
    if matches.keys().isdisjoint(ref):
        return []
    rows = _lcs_rows(ref, width, matches)
    i, j = len(ref), width
    length = width - rows[i].bit_count()  # table[i][j] all along the path
    picked: list[int] = []
    while length:
        if ref[i - 1] == pred[j - 1]:
            i -= 1
            j -= 1
            length -= 1
            picked.append(i)
        elif j - (rows[i - 1] & ((1 << j) - 1)).bit_count() == length:
            # rouge-score moves left only if table[i][j-1] > table[i-1][j]; off a match the
            # larger of the two equals table[i][j], so it moves up when table[i-1][j] does.
            i -= 1
        else:
            j -= 1
    picked.reverse()
    return picked
