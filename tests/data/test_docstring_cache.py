"""The disk cache of parsed docstrings: it gives exactly what the parse gives, it is read
instead of parsing again, a change to what the pairs depend on rebuilds it, and no damaged,
half-written or unwritable cache stops a dataset from loading."""

import gzip
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.data import docstring_cache, docstrings
from llm_pipeline.data.docstrings import DocstringPair
from llm_pipeline.progress import parse_status
from llm_pipeline.tasks.instruction_tuning.demo_data import build_instruction_splits
from llm_pipeline.tasks.summarization.demo_data import build_docstring_splits
from llm_pipeline.tasks.text_classification.demo_data import build_package_splits

REPO = Path(__file__).resolve().parents[2]
PROSE = (
    "The queue is shared by every worker of the pool, and a task that fails is put back "
    "at its end so that the other tasks are not held up by it."
)


def _write_roots(root: Path) -> Path:
    """A package of a few files whose pairs use every field: a module's own docstring,
    classes and methods, a duplicate (dropped), quotes, a backslash and an accent."""
    package = root / "pool"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f'"""Worker pools that share one queue of tasks.\n\n{PROSE}\n"""\n'
    )
    (package / "queue.py").write_text(
        f'''
class Queue:
    """A queue of tasks with "retries" and a C:\\\\temp folder.

    The café's {PROSE}
    """

    def put(self):
        """Put one task at the end of the queue.

        {PROSE.replace("every worker", "each worker")}
        """
'''
    )
    (package / "copy.py").write_text(  # the same summary again: deduplicated away
        f'def put():\n    """Put one task at the end of the queue.\n\n    {PROSE}\n    """\n'
    )
    return root


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    return [_write_roots(tmp_path / "roots")]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache for one test (not the session's), and no folder remembered unwritable."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(docstring_cache.ENV_VAR, str(folder))
    monkeypatch.setattr(docstring_cache, "_unwritable", set())
    return folder / "docstrings"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the parses: one entry per call of the expensive part."""
    calls: list[int] = []
    parse = docstrings._pairs_of_files

    def counted(*args: Any, **kwargs: Any) -> list[DocstringPair]:
        calls.append(1)
        return parse(*args, **kwargs)

    monkeypatch.setattr(docstrings, "_pairs_of_files", counted)
    return calls


def _uncached(roots: list[Path]) -> list[DocstringPair]:
    return docstrings.parsed_pairs(list(docstrings.source_files(roots)), roots, workers=1)


def _pairs(roots: list[Path]) -> list[DocstringPair]:
    """The pairs through the cache, as build_pair_splits gets them."""
    files = list(docstrings.source_files(roots))
    return docstring_cache.cached_pairs(
        roots,
        files,
        depends_on=[docstrings.environment_fingerprint(), f"parser {docstrings.PARSER_VERSION}"],
        build=lambda: docstrings.parsed_pairs(files, roots, workers=1),
    )


def test_the_cached_pairs_are_the_parsed_ones_in_the_same_order(
    roots: list[Path], cache_dir: Path, parses: list[int]
) -> None:
    parsed = _uncached(roots)
    names = [pair.qualified_name for pair in parsed]
    assert names == ["pool", "pool.queue.Queue", "pool.queue.Queue.put"]
    assert parsed[0].is_module and "café" in parsed[1].body and "C:\\temp" in parsed[1].summary
    assert _pairs(roots) == parsed  # built and stored
    assert _pairs(roots) == parsed  # read back
    assert len(parses) == 2  # one parse to compare with, one to fill the cache
    assert [path.name for path in cache_dir.iterdir()] == [
        next(cache_dir.glob("pairs-*.jsonl.gz")).name
    ]  # no temporary file left behind


def test_a_first_load_says_it_builds_the_cache_and_how_far_it_is(
    roots: list[Path], cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr(docstrings, "PROGRESS_EVERY_S", 0.0)  # a line per file
    _pairs(roots)
    (stored,) = cache_dir.glob("pairs-*.jsonl.gz")
    assert [parse_status(line) for line in capsys.readouterr().out.splitlines()] == [
        f"building the docstring cache {stored} (once; later runs read it in seconds): "
        "parsing 3 Python files",
        *(f"docstring cache: {done} of 3 files parsed" for done in (1, 2, 3)),
    ]
    _pairs(roots)
    assert capsys.readouterr().out == ""  # read back at once: nothing to announce


def test_the_three_builtins_share_one_parse(
    roots: list[Path], cache_dir: Path, parses: list[int]
) -> None:
    summaries = build_docstring_splits(roots, seed=1, workers=1)
    instructions = build_instruction_splits(roots, seed=1, workers=1)
    packages = build_package_splits(roots, seed=1, workers=1, packages=1)
    assert len(parses) == 1
    assert sum(map(len, summaries.values())) == sum(map(len, instructions.values())) == 3
    assert {row["label"] for rows in packages.values() for row in rows} == {"pool"}


@pytest.mark.parametrize(
    "change",
    [
        "an installed package",
        "the parsing rules",
        "the cache format",
        "an edited file",
        "a new file",
        "other roots",
    ],
)
def test_a_change_to_what_the_pairs_depend_on_rebuilds_them(
    change: str,
    roots: list[Path],
    cache_dir: Path,
    parses: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = _pairs(roots)
    if change == "an installed package":
        monkeypatch.setattr(docstrings, "environment_fingerprint", lambda: "0" * 64)
    elif change == "the parsing rules":
        monkeypatch.setattr(docstrings, "PARSER_VERSION", docstrings.PARSER_VERSION + 1)
    elif change == "the cache format":
        monkeypatch.setattr(docstring_cache, "FORMAT", docstring_cache.FORMAT + 1)
    elif change == "an edited file":
        init = roots[0] / "pool" / "__init__.py"
        init.write_text(init.read_text().replace("Worker pools", "Pools of workers"))
    elif change == "a new file":
        (roots[0] / "pool" / "empty.py").write_text("")
    else:
        roots = [_write_roots(roots[0].parent / "other")]
    after = _pairs(roots)
    assert len(parses) == 2
    assert after == _uncached(roots)
    assert (after != before) == (change == "an edited file")
    assert _pairs(roots) == after and len(parses) == 3  # the rebuilt cache is read back


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flipped(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


def _a_pair_short(data: bytes) -> bytes:
    lines = gzip.decompress(data).splitlines(keepends=True)
    return gzip.compress(b"".join(lines[:-1]))


@pytest.mark.parametrize(
    "damage",
    [_truncated, _flipped, _a_pair_short, lambda data: b"", lambda data: b"not gzip at all"],
    ids=["truncated", "a flipped byte", "a pair short", "empty", "not gzip"],
)
def test_a_damaged_cache_file_is_ignored_and_replaced(
    damage: Callable[[bytes], bytes],
    roots: list[Path],
    cache_dir: Path,
    parses: list[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    expected = _pairs(roots)
    (stored,) = cache_dir.glob("pairs-*.jsonl.gz")
    stored.write_bytes(damage(stored.read_bytes()))
    with caplog.at_level(logging.WARNING, logger=docstring_cache.__name__):
        assert _pairs(roots) == expected
    assert "ignoring the unreadable docstring cache" in caplog.text
    assert len(parses) == 2
    assert _pairs(roots) == expected and len(parses) == 2  # replaced by a good one


def test_an_unwritable_cache_folder_turns_the_cache_off_with_one_warning(
    roots: list[Path],
    cache_dir: Path,
    parses: list[int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder cannot be made under a file, even by root
    monkeypatch.setenv(docstring_cache.ENV_VAR, str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger=docstring_cache.__name__):
        assert _pairs(roots) == _pairs(roots) == _uncached(roots)
    assert len(parses) == 3
    assert caplog.text.count("the docstring cache is off") == 1
    assert docstring_cache.ENV_VAR in caplog.text


def test_a_writer_killed_before_its_rename_leaves_nothing_to_read(
    roots: list[Path], cache_dir: Path, parses: list[int]
) -> None:
    # A real SIGKILL once the temporary file is written and synced, before the rename.
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from llm_pipeline.data import docstring_cache, docstrings\n"
        "docstring_cache.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "docstrings.build_pair_splits([Path(sys.argv[1])], workers=1)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    killed = subprocess.run(
        [sys.executable, "-c", script, str(roots[0])], env=env, timeout=120, check=False
    )
    assert killed.returncode == -9
    (left,) = cache_dir.iterdir()
    assert left.name.startswith(".pairs-") and left.name.endswith(".tmp")
    assert _pairs(roots) == _uncached(roots)  # a parse: the temporary file is not read
    assert len(parses) == 2
    # The next writer removes what a killed one left, once it is surely not in use.
    an_hour_ago = time.time() - docstring_cache.STALE_TEMP_S - 60
    os.utime(left, (an_hour_ago, an_hour_ago))
    (next(cache_dir.glob("pairs-*.jsonl.gz"))).unlink()
    _pairs(roots)
    assert [path.suffix for path in cache_dir.iterdir()] == [".gz"]


def test_two_builders_at_once_both_succeed(
    roots: list[Path], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _uncached(roots)
    parse = docstrings._pairs_of_files
    both_parsing = threading.Barrier(2, timeout=30)

    def parse_together(*args: Any) -> list[DocstringPair]:
        both_parsing.wait()  # neither found a cache; both will write one
        return parse(*args)

    monkeypatch.setattr(docstrings, "_pairs_of_files", parse_together)
    results: list[list[DocstringPair]] = []
    builders = [threading.Thread(target=lambda: results.append(_pairs(roots))) for _ in range(2)]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join(timeout=60)
    assert results == [expected, expected]
    monkeypatch.setattr(docstrings, "_pairs_of_files", None)  # a parse now would fail
    assert _pairs(roots) == expected
    assert len(list(cache_dir.iterdir())) == 1


def test_the_cache_folder_follows_the_variable_then_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(docstring_cache.ENV_VAR, str(tmp_path / "mine"))
    assert docstring_cache.cache_folder() == tmp_path / "mine" / "docstrings"
    monkeypatch.delenv(docstring_cache.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert docstring_cache.cache_folder() == tmp_path / "xdg" / "llm-pipeline" / "docstrings"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as the spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".cache" / "llm-pipeline" / "docstrings"
    assert docstring_cache.cache_folder() == expected


def test_the_suite_caches_under_pytests_folder_not_the_users(docstring_cache_dir: Path) -> None:
    # tests/conftest.py spells the variable out; this keeps it the module's.
    assert os.environ[docstring_cache.ENV_VAR] == str(docstring_cache_dir)
