"""The docstring pairs of this Python's installed code, parsed offline: what every demo's
built-in dataset is made from (each task's `demo_data` module shapes its rows).

Why docstrings: every machine that runs the pipeline has them, with no network and no folder
beside the checkout; they are real text written by people; and PEP 257 makes them a
summarization corpus: a docstring opens with a one-line summary of what follows. Each pair
(`DocstringPair`) is the documented object's qualified name and module, its summary
paragraph on one line, and the prose paragraphs of the docstring after it (up to the first
section such as `Args:`, `Parameters`, `>>>` or an indented code block).

How they are built, so the same installed packages always give the same datasets:

- source files of the standard library and of site-packages are parsed, never imported
  (importing runs code); test folders, vendored copies and generated files are skipped;
- pairs are kept when both parts have a sensible length and read as English prose (ASCII,
  mostly letters, a share of common English words);
- duplicates go: a body or a summary seen before (vendored copies, overloads, generated
  clients) keeps only its first pair, in path order;
- each pair's split (train, validation, test) and its place within the split come from a
  seeded hash of its summary (`build_pair_splits`), so a new package adds pairs without
  reshuffling the others.

The parse takes a minute on two cores, so its result (the deduplicated pairs, before the
split) is kept on disk for the next load and every dataset built from it
(data/docstring_cache.py; `~/.cache/llm-pipeline/docstrings/` by default).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.metadata
import inspect
import logging
import os
import platform
import re
import sysconfig
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from llm_pipeline.data import docstring_cache
from llm_pipeline.data.docstring_cache import DocstringPair
from llm_pipeline.progress import status

logger = logging.getLogger(__name__)

#: The version of the rules below: bump it when a change alters what a file gives, so that
#: the cached parses (data/docstring_cache.py) are rebuilt.
PARSER_VERSION = 1
#: Share of pairs in each held-out split (by hash, so stable as packages come and go).
HELD_OUT_SHARE = {"validation": 0.025, "test": 0.025}
#: Bounds on words, for the summary line and for the body.
SUMMARY_WORDS = (3, 30)
BODY_WORDS = (20, 250)
#: Folders whose code is not the package's own prose: tests, vendored copies, caches.
SKIPPED_FOLDERS = frozenset(
    {"tests", "test", "testing", "_vendor", "vendor", "vendored", "__pycache__", "site-packages"}
)
#: Seconds between the parse's progress lines.
PROGRESS_EVERY_S = 10.0
#: Files larger than this are generated tables, not hand-written code.
LARGEST_FILE = 2_000_000
#: Marks of generated code, looked for in a file's first bytes.
_GENERATED = re.compile(rb"DO NOT EDIT|[Aa]uto-?generated|[Gg]enerated by|[Gg]enerated code")
#: A paragraph that opens a docstring section ends the prose (Google, NumPy, Sphinx styles).
_SECTION = re.compile(
    r"^(args|arguments|parameters|params|returns?|yields?|raises|examples?|notes?|see also|"
    r"attributes|keyword arguments|other parameters|warnings?|references|todo|usage|methods)"
    r"\s*:?$",
    re.IGNORECASE,
)
_UNDERLINE = re.compile(r"^[-=~^]{3,}$")
_MARKUP_OPENERS = (">>>", ":param", ":return", ":raises", ":type", "..", "@", "-", "*", "|", "+")
#: Common English words: real prose is made of them, code and tables are not.
_ENGLISH = frozenset(
    [
        "the",
        "a",
        "an",
        "of",
        "to",
        "in",
        "is",
        "and",
        "or",
        "for",
        "that",
        "this",
        "it",
        "be",
        "are",
        "with",
        "as",
        "by",
        "on",
        "from",
        "not",
        "if",
        "which",
        "when",
        "can",
        "will",
        "its",
        "at",
        "all",
        "any",
        "has",
        "have",
        "was",
        "may",
        "must",
        "should",
    ]
)


def default_roots() -> list[Path]:
    """The standard library and the site-packages folders of this interpreter."""
    paths = sysconfig.get_paths()
    roots = [Path(paths[key]) for key in ("stdlib", "purelib", "platlib")]
    return [root for i, root in enumerate(roots) if root.is_dir() and root not in roots[:i]]


def environment_fingerprint() -> str:
    """What the dataset is a function of: the Python version and every installed
    distribution with its version. Equal fingerprints give equal datasets."""
    distributions = sorted(
        f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions()
    )
    text = "\n".join([platform.python_version(), *distributions])
    return hashlib.sha256(text.encode()).hexdigest()


def build_pair_splits(
    roots: Sequence[Path] | None = None,
    *,
    seed: int = 0,
    workers: int | None = None,
    held_out: Mapping[str, float] = HELD_OUT_SHARE,
) -> dict[str, list[DocstringPair]]:
    """`{split: [DocstringPair]}` for `roots`, split (`held_out`: the share of each held-out
    split) and ordered by seeded hash of the summary: what every dataset built from
    docstrings starts from."""
    roots = list(roots or default_roots())
    files = list(source_files(roots))
    pairs = docstring_cache.cached_pairs(
        roots,
        files,
        depends_on=[environment_fingerprint(), f"parser {PARSER_VERSION}"],
        build=lambda: parsed_pairs(files, roots, workers),
    )
    splits: dict[str, list[tuple[float, DocstringPair]]] = {
        "train": [],
        "validation": [],
        "test": [],
    }
    for pair in pairs:
        draw = unit_hash(pair.summary, seed)
        bound = 0.0
        split = "train"
        for name, share in held_out.items():
            if bound <= draw < bound + share:
                split = name
            bound += share
        # The place within the split: a second, independent draw.
        splits[split].append((unit_hash(pair.summary, seed + 1), pair))
    return {name: [pair for _, pair in sorted(rows, key=_by_draw)] for name, rows in splits.items()}


def parsed_pairs(
    files: list[Path], roots: Sequence[Path], workers: int | None = None
) -> list[DocstringPair]:
    """The deduplicated pairs of `files` (found under `roots`), in path order: the slow part,
    which the cache stores."""
    started = time.monotonic()
    logger.info("reading docstrings from %d Python files (parsed, not imported)", len(files))
    modules = [module_name(path, roots) for path in files]
    pairs = deduplicated(_pairs_of_files(files, modules, workers))
    logger.info("%d docstring pairs in %.0f s", len(pairs), time.monotonic() - started)
    return pairs


def module_name(path: Path, roots: Sequence[Path]) -> str:
    """The dotted module a source file is (`json/decoder.py` → `json.decoder`)."""
    for root in roots:
        if path.is_relative_to(root):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts) or path.stem
    return path.stem


def source_files(roots: Iterable[Path]) -> Iterator[Path]:
    """Python files under `roots` in path order, without tests, vendored or generated code."""
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            inside = path.relative_to(root).parts[:-1]
            if SKIPPED_FOLDERS.intersection(inside):
                continue
            try:
                if path.stat().st_size <= LARGEST_FILE:
                    yield path
            except OSError:  # a broken symlink, a file removed meanwhile
                continue


def docstring_pairs(path: Path, module: str = "") -> list[DocstringPair]:
    """The usable pairs of one source file (the dotted `module` it is), in the order its
    definitions appear."""
    try:
        source = path.read_bytes()
        if _GENERATED.search(source[:3000]):
            return []
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return []
    pairs = []
    for name, docstring, is_module in _named_docstrings(tree, path.stem):
        parts = split_docstring(docstring)
        if parts is not None and reads_as_prose(*parts):
            summary, body = parts
            pairs.append(DocstringPair(name, body, summary, module=module, is_module=is_module))
    return pairs


def split_docstring(docstring: str) -> tuple[str, str] | None:
    """(summary, body): the first paragraph, and the prose paragraphs after it, each on one
    line; None when there is no prose after the summary."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(docstring).strip())
    if len(paragraphs) < 2:
        return None
    body = []
    for paragraph in paragraphs[1:]:
        lines = paragraph.splitlines()
        first = lines[0].strip()
        underlined = len(lines) > 1 and _UNDERLINE.match(lines[1].strip())
        if _SECTION.match(first) or underlined or first.startswith(_MARKUP_OPENERS):
            break
        if any(line.startswith((" ", "\t")) for line in lines):
            continue  # an indented block: code or a literal, not prose
        body.append(" ".join(paragraph.split()))
    if not body:
        return None
    return " ".join(paragraphs[0].split()), " ".join(body)


def reads_as_prose(summary: str, body: str) -> bool:
    """Both parts have a sensible length and read as English prose."""
    summary_words, body_words = summary.split(), body.split()
    if not SUMMARY_WORDS[0] <= len(summary_words) <= SUMMARY_WORDS[1]:
        return False
    if not BODY_WORDS[0] <= len(body_words) <= BODY_WORDS[1]:
        return False
    if not summary[0].isupper() or summary.endswith(":"):
        return False
    text = f"{summary} {body}"
    if sum(char.isascii() for char in text) < 0.99 * len(text):
        return False
    if sum(char.isalpha() or char.isspace() for char in body) < 0.85 * len(body):
        return False
    common = sum(word.lower().strip(".,;:()") in _ENGLISH for word in body_words)
    return common >= 0.2 * len(body_words)


def deduplicated(pairs: Iterable[DocstringPair]) -> list[DocstringPair]:
    """The first pair for each body and for each summary (compared without case or spacing)."""
    seen: set[str] = set()
    kept = []
    for pair in pairs:
        body = " ".join(pair.body.lower().split())
        summary = " ".join(pair.summary.lower().split())
        if f"b:{body}" in seen or f"s:{summary}" in seen:
            continue
        seen.update({f"b:{body}", f"s:{summary}"})
        kept.append(pair)
    return kept


def _named_docstrings(tree: ast.Module, module: str) -> Iterator[tuple[str, str, bool]]:
    """(qualified name, docstring, whether it is the module's) for the module and every
    class and function in it."""
    docstring = ast.get_docstring(tree, clean=False)
    if docstring:
        yield module, docstring, True
    yield from _definitions(tree, "")


def _definitions(node: ast.AST, prefix: str) -> Iterator[tuple[str, str, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + child.name
            docstring = ast.get_docstring(child, clean=False)
            if docstring:
                yield name, docstring, False
            if isinstance(child, ast.ClassDef):
                yield from _definitions(child, f"{name}.")


def _pairs_of_files(
    files: list[Path], modules: list[str], workers: int | None
) -> list[DocstringPair]:
    """Every file's pairs, in file order; parsed in `workers` processes (default: CPUs).
    Progress is a status line every `PROGRESS_EVERY_S` seconds."""
    workers = workers or len(os.sched_getaffinity(0))
    with contextlib.ExitStack() as stack:
        if workers == 1 or len(files) < 100:
            found: Iterable[list[DocstringPair]] = map(docstring_pairs, files, modules)
        else:
            chunk = max(1, len(files) // (workers * 8))
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers))
            found = pool.map(docstring_pairs, files, modules, chunksize=chunk)
        pairs: list[DocstringPair] = []
        shown = time.monotonic()
        for done, file_pairs in enumerate(found, 1):
            pairs += file_pairs
            if time.monotonic() - shown >= PROGRESS_EVERY_S:
                shown = time.monotonic()
                status(f"docstring cache: {done:,} of {len(files):,} files parsed")
        return pairs


def _by_draw(row: tuple[float, DocstringPair]) -> tuple[float, str, str]:
    # Ties in the draw are all but impossible; the texts make the order total regardless.
    draw, pair = row
    return draw, pair.name, pair.summary


def unit_hash(text: str, seed: int) -> float:
    """A number in [0, 1) drawn from `text` and `seed`; the same on every machine."""
    digest = hashlib.sha256(f"{seed}\0{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
