"""The built-in docstring dataset: which docstrings become pairs, and that the same files
always give the same splits."""

import textwrap
from pathlib import Path

import pytest

from llm_pipeline.config import DataConfig
from llm_pipeline.data import docstrings
from llm_pipeline.data.sources import load_source
from llm_pipeline.errors import DataError
from llm_pipeline.tasks import builtin_datasets

PROSE = (
    "The queue is shared by every worker of the pool, and a task that fails is put back "
    "at its end so that the other tasks are not held up by it."
)


def _module(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


def _function(name: str, summary: str, body: str = PROSE) -> str:
    return f'''
    def {name}():
        """{summary}

        {body}

        Args:
            nothing: this section is not prose and is left out.
        """
    '''


def test_summary_line_against_the_prose_that_follows(tmp_path: Path) -> None:
    path = _module(tmp_path, "pool.py", _function("put_back", "Put a failed task back."))
    (pair,) = docstrings.docstring_pairs(path)
    assert pair.summary == "Put a failed task back."
    assert pair.document == f"put_back: {PROSE}"
    assert "Args" not in pair.document


def test_methods_are_named_by_their_class(tmp_path: Path) -> None:
    source = (
        '''
    class Pool:
        """A pool of worker processes that share one queue.

        '''
        + PROSE
        + '''
        """

        def close(self):
            """Stop taking new tasks and wait for the running ones.

            '''
        + PROSE
        + '''
            """
    '''
    )
    path = _module(tmp_path, "pool.py", source)
    assert [pair.document.split(":")[0] for pair in docstrings.docstring_pairs(path)] == [
        "Pool",
        "Pool.close",
    ]


@pytest.mark.parametrize(
    ("summary", "body", "why"),
    [
        ("Put back.", PROSE, "a two-word summary"),
        ("Put a failed task back.", "Too short to summarize.", "a short body"),
        ("put a failed task back.", PROSE, "a summary that is not a sentence"),
        ("Put a failed task back.", "x = 1; y = 2; z = [3, 4] * 5 + f(6) / 7 " * 4, "code"),
        ("Put a failed task back.", "Die Warteschlange wird von allen geteilt. " * 4, "German"),
    ],
)
def test_docstrings_that_are_not_usable_prose_are_left_out(
    tmp_path: Path, summary: str, body: str, why: str
) -> None:
    path = _module(tmp_path, "m.py", _function("f", summary, body))
    assert docstrings.docstring_pairs(path) == [], why


def test_tests_vendored_and_generated_code_are_skipped(tmp_path: Path) -> None:
    kept = _module(tmp_path, "pkg/core.py", _function("a", "Do the first thing well."))
    _module(tmp_path, "pkg/tests/test_core.py", _function("b", "Test the first thing."))
    _module(tmp_path, "pkg/_vendor/six.py", _function("c", "Do a vendored thing."))
    generated = "# Generated code. DO NOT EDIT!\n" + textwrap.dedent(
        _function("d", "Call the remote method.")
    )
    (tmp_path / "pkg" / "client.py").write_text(generated)
    files = list(docstrings.source_files([tmp_path]))
    assert kept in files and len(files) == 2  # core.py and client.py
    assert [p.summary for f in files for p in docstrings.docstring_pairs(f)] == [
        "Do the first thing well."
    ]


def test_repeated_bodies_and_summaries_keep_their_first_pair(tmp_path: Path) -> None:
    other = PROSE.replace("queue", "list")
    source = "".join(
        [
            _function("a", "Put a failed task back."),
            _function("b", "Put a failed task back.", other),  # same summary
            _function("c", "Requeue a task that failed."),  # same body, in other case
        ]
    )
    path = _module(tmp_path, "m.py", source)
    kept = docstrings.deduplicated(docstrings.docstring_pairs(path))
    assert [pair.document.split(":")[0] for pair in kept] == ["a"]


def _corpus(folder: Path, count: int) -> None:
    for i in range(count):
        body = PROSE.replace("every worker", f"each of the {i + 2} workers")
        summary = f"Handle case number {i} of the set."
        _module(folder, f"m{i:03d}.py", _function(f"f{i}", summary, body))


def test_the_same_files_give_the_same_splits_and_new_files_move_nothing(
    tmp_path: Path,
) -> None:
    _corpus(tmp_path, 120)
    first = docstrings.build_pair_splits([tmp_path], seed=3, workers=1)
    again = docstrings.build_pair_splits([tmp_path], seed=3, workers=2)
    assert first == again
    assert sum(len(pairs) for pairs in first.values()) == 120
    assert first["validation"] and first["test"]  # 2.5% each of 120, by hash: a few
    _module(tmp_path, "zz_new.py", _function("g", "Handle one more case of the set."))
    grown = docstrings.build_pair_splits([tmp_path], seed=3, workers=1)
    for split, pairs in first.items():
        assert [pair for pair in grown[split] if "one more case" not in pair.summary] == pairs
    reseeded = docstrings.build_pair_splits([tmp_path], seed=4, workers=1)
    assert reseeded["train"] != first["train"]


def test_a_config_names_it_and_a_typo_is_refused_naming_every_builtin(tmp_path: Path) -> None:
    with pytest.raises(DataError) as refused:
        load_source(DataConfig(dataset="builtin:docstring"), tmp_path, builtins=builtin_datasets())
    assert str(refused.value) == (
        "data.dataset: unknown built-in dataset 'builtin:docstring'; the built-in ones are "
        "'builtin:docstrings' (document/summary pairs from the docstrings of the installed "
        "Python packages), 'builtin:instructions' (the same docstrings as prompt/response "
        "pairs), 'builtin:docstring_packages' (the same docstrings, text labelled with the "
        "package it comes from) and 'builtin:preferences' (the same prompts, each with its own "
        "summary line chosen and another object's of the same module rejected)"
    )


def test_the_environment_fingerprint_names_what_the_data_depends_on() -> None:
    assert docstrings.environment_fingerprint() == docstrings.environment_fingerprint()
    assert len(docstrings.environment_fingerprint()) == 64
