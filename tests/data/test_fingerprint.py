"""The digest that keys a local run's cached download: same content, same digest."""

from pathlib import Path

from llm_pipeline.data.docstrings import environment_fingerprint
from llm_pipeline.data.fingerprint import content_digest


def test_a_file_is_known_by_its_bytes_not_its_name_or_time(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text('{"document": "a", "summary": "b"}\n')
    first = content_digest(str(data))
    data.touch()
    assert content_digest(str(data)) == first
    data.write_text('{"document": "a", "summary": "c"}\n')
    assert content_digest(str(data)) != first


def test_a_folder_is_known_by_its_files_and_their_names(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text("x\n")
    (tmp_path / "validation.jsonl").write_text("y\n")
    first = content_digest(str(tmp_path))
    (tmp_path / "validation.jsonl").rename(tmp_path / "test.jsonl")
    assert content_digest(str(tmp_path)) != first


def test_relative_paths_resolve_from_the_base(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("document,summary\n")
    assert content_digest("d.csv", base=tmp_path) == content_digest(str(tmp_path / "d.csv"))


def test_unknowable_content_is_not_cached() -> None:
    assert content_digest("gs://bucket/data.jsonl") is None
    assert content_digest("abisee/cnn_dailymail") is None  # a hub id: no local content


def test_the_docstrings_are_known_by_the_installed_packages() -> None:
    assert content_digest("builtin:docstrings") == f"builtin:docstrings:{environment_fingerprint()}"
    # The instructions are the same docstrings asked back: the same packages, a distinct key.
    instructions = content_digest("builtin:instructions")
    assert instructions == f"builtin:instructions:{environment_fingerprint()}"
    packages = content_digest("builtin:docstring_packages")
    assert packages == f"builtin:docstring_packages:{environment_fingerprint()}"
