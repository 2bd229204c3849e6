"""Sentence splitting that needs no downloaded model.

nltk's punkt needs data files that offline machines do not have, and rougeLsum and lead-k
both need sentences. Two kinds of text come through here:

* ordinary prose ("Mr. Smith paid $3.5 million. He left."), where a full stop may also end
  an abbreviation, and where case tells a sentence start from a continuation;
* pre-tokenized text such as the CNN/DailyMail release (lowercased, Penn-Treebank tokens),
  where the tokenizer already separated every sentence-final mark into its own token
  (" . ", " ! ", " ? ", maybe followed by " '' " or " -rrb- ") and a full stop still
  attached to a word ("u.s.", "mr.", "calif.") is always part of an abbreviation.

Every line break ends a sentence. Sentences are only ever cut at whitespace and returned
as stripped slices of the input, so joining them with any whitespace yields the same words
as the input. rouge.py relies on this: its tokens for rouge1/2/L are the tokens of the
rougeLsum lines, put together.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import islice

__all__ = ["iter_sentences", "lead_k", "split_sentences"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Titles and the like are followed by a name, so they never end a sentence.
_NEVER_FINAL = _words(
    "mr mrs ms messrs dr prof rev fr st mt ft sen rep gov gen col lt maj sgt capt cmdr adm "
    "hon pres supt insp det cpl pvt e.g i.e cf vs viz"
)
# Abbreviations that can end a sentence, but usually do not.
_ABBREVIATIONS = _words(
    "etc inc ltd co corp llc plc bros jr sr snr no nos vol approx dept est fig al ave blvd "
    "jan feb mar apr jun jul aug sep sept oct nov dec calif fla ill mass"
)
# After an abbreviation, these words are evidence that a new sentence started.
_STARTERS = _words(
    "the a an he she it they we i you his her its their our my this that these those there "
    "but and so then in on at for if when while after as however meanwhile"
)
_OPENERS = "([{\"'“‘«`"
_CLOSERS = ")]}\"'”’»"
# Tokens that close a sentence after a standalone full stop (PTB escapes brackets).
_CLOSER_TOKENS = frozenset(
    ["''", "'", '"', "”", "’", "»", ")", "]", "}", "-rrb-", "-rsb-", "-rcb-"]
)
_STANDALONE_END = re.compile(r"[.!?]+|…")
_ELLIPSIS = re.compile(r"\.\.+|…")
_TERMINAL = re.compile(r"(?:[.!?]+|…)$")
_INITIALS = re.compile(r"(?:[A-Za-z]\.)*[A-Za-z]")
# A whole whitespace-delimited token whose end may end a sentence: a mark, then closers.
_CANDIDATE = re.compile(r"(?<!\S)\S*?[.!?…][)\]}\"'”’»]*(?!\S)")
_NEXT_TOKEN = re.compile(r"\s*(\S+)")
# A lone "." after a word that is not itself ".", and not followed by another lone ".".
_PTB_STOP = re.compile(r"(?:^|\s)(?!\.\s)\S+\s+\.(?=\s|$)(?!\s+\.(?:\s|$))")


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences: stripped, non-empty slices cut only at whitespace."""
    return list(iter_sentences(text))


def iter_sentences(text: str) -> Iterator[str]:
    """Sentences of `text` one at a time, so lead-k reads no further than it needs."""
    if not isinstance(text, str):
        raise ValueError(f"expected a str, got {type(text).__name__}")
    return (sentence for line in text.splitlines() for sentence in _line_sentences(line))


def lead_k(document: str, k: int = 3) -> str:
    """The first `k` sentences of `document`, one per line (Lead-3 is the CNN/DM floor).

    One sentence per line is what rougeLsum reads, so the baseline is scored exactly like a
    model output that was split into sentences.
    """
    if not isinstance(document, str):
        raise ValueError(f"lead_k expects a str document, got {type(document).__name__}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return "\n".join(islice(iter_sentences(document), k))


def _line_sentences(line: str) -> Iterator[str]:
    first = _NEXT_TOKEN.match(line)
    if first is None:
        return
    start = first.start(1)  # where the current sentence begins
    pretokenized = _is_pretokenized(line)
    cased = line != line.lower()
    # Regular expressions find the few tokens that can end a sentence, so the Python-level
    # checks below run once per candidate instead of once per word.
    for cand in _CANDIDATE.finditer(line):
        if cand.start() < start:
            continue  # already taken into the previous sentence
        nxt = _NEXT_TOKEN.match(line, cand.end())
        if nxt is None:
            break
        if not _ends_sentence(
            cand.group(), nxt.group(1), cand.start() == start, pretokenized, cased
        ):
            continue
        end = cand.end()
        # Closing quotes and brackets (and "?!" runs) belong to the sentence they close.
        while nxt is not None and (
            nxt.group(1).lower() in _CLOSER_TOKENS or _STANDALONE_END.fullmatch(nxt.group(1))
        ):
            end = nxt.end(1)
            nxt = _NEXT_TOKEN.match(line, end)
        if nxt is None:
            break
        yield line[start:end]
        start = nxt.start(1)
    yield line[start:].rstrip()


def _is_pretokenized(line: str) -> bool:
    """Whether some lone full stop ends a sentence (PTB style), not an ellipsis ". . ."."""
    return _PTB_STOP.search(line) is not None


def _ends_sentence(
    tok: str, nxt: str, opens_sentence: bool, pretokenized: bool, cased: bool
) -> bool:
    """Whether a sentence ends after token `tok`, which `nxt` follows."""
    nxt = nxt.lstrip(_OPENERS)
    nxt_lower = nxt[:1].islower()
    if _STANDALONE_END.fullmatch(tok):
        if tok == "." and nxt == ".":
            return False  # inside a spaced ellipsis ". . ."
        if _ELLIPSIS.fullmatch(tok):
            # "wait ... what": an ellipsis ends a sentence only before a capital.
            return cased and nxt[:1].isupper()
        return not (cased and nxt_lower)
    core = tok.rstrip(_CLOSERS)
    terminal = _TERMINAL.search(core)
    if terminal is None or pretokenized:
        # A tokenizer split real sentence ends off; what is still attached is an abbreviation.
        return False
    if cased and nxt_lower:
        # '"Why?" he asked', 'the U.S. economy', '3 p.m. today'.
        return False
    mark = terminal.group()
    if "!" in mark or "?" in mark:
        return True
    if _ELLIPSIS.fullmatch(mark):
        return cased and nxt[:1].isupper()
    word = core[: terminal.start()].lstrip(_OPENERS)
    key = word.lower()
    if key in _NEVER_FINAL:
        return False
    if opens_sentence and (word.isdigit() or len(word) == 1):
        # Enumerations: "1. Buy milk", "a. First item".
        return False
    if key in _ABBREVIATIONS or _INITIALS.fullmatch(word):
        # "in the U.S. He said" ends; "John F. Kennedy" and "Apple Inc. Chief" do not.
        return nxt.lower().rstrip(",;:") in _STARTERS
    return True
