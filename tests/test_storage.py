"""Paths through fsspec (local, gs:// on the emulator, /gcs/) and outputs that appear whole."""

import json
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest

from llm_pipeline.storage import (
    GCS_MOUNT,
    atomic_output_dir,
    is_remote,
    is_temp_file,
    local_copy,
    looks_like_path,
    to_uri,
    write_atomic,
)


def test_remote_and_local_uris():
    assert is_remote("gs://bucket/data")
    assert is_remote("s3://bucket/data")
    assert not is_remote("/data/train.jsonl")
    assert not is_remote("relative/train.jsonl")
    assert not is_remote("file:///data/train.jsonl")
    assert to_uri("file:///data/train.jsonl") == "/data/train.jsonl"


@pytest.mark.parametrize("hub_id", ["t5-small", "google/flan-t5-base", "knkarthick/dialogsum"])
def test_hub_ids_are_not_paths(hub_id):
    assert not looks_like_path(hub_id)


@pytest.mark.parametrize(
    "path", ["/data/model", "./model", "../model", "~/model", "runs/2024/model", "file:///m"]
)
def test_names_that_start_or_nest_like_a_path_are_paths(path):
    assert looks_like_path(path)


@pytest.mark.skipif(GCS_MOUNT.is_dir(), reason="a real /gcs mount is present")
def test_vertex_mount_paths_read_as_gcs_uris_off_vertex():
    assert to_uri("/gcs/bucket/runs/dataset") == "gs://bucket/runs/dataset"
    assert is_remote("/gcs/bucket/runs/dataset")
    assert to_uri("/gcsx/bucket") == "/gcsx/bucket"


def test_local_copy_of_a_local_path_is_the_path(tmp_path):
    (tmp_path / "train.jsonl").write_text("{}\n")
    assert local_copy(tmp_path / "train.jsonl", tmp_path / "copies") == tmp_path / "train.jsonl"
    assert not (tmp_path / "copies").exists()
    with pytest.raises(FileNotFoundError):
        local_copy(tmp_path / "missing.jsonl", tmp_path / "copies")


def test_local_copy_of_gcs_folder_and_file(tmp_path, gcs_bucket):
    gcs = fsspec.filesystem("gs")
    gcs.pipe(f"{gcs_bucket}/saved/dataset_dict.json", b'{"splits": ["train"]}')
    gcs.pipe(f"{gcs_bucket}/saved/train/state.json", b"{}")

    folder = local_copy(f"gs://{gcs_bucket}/saved", tmp_path / "copies")
    file = local_copy(f"gs://{gcs_bucket}/saved/train/state.json", tmp_path / "files")

    assert folder == tmp_path / "copies" / "saved"
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "dataset_dict.json",
        "train/state.json",
    ]
    assert file.read_bytes() == b"{}"
    with pytest.raises(FileNotFoundError):
        local_copy(f"gs://{gcs_bucket}/nothing", tmp_path / "copies")


def siblings(path: Path) -> list[str]:
    return sorted(entry.name for entry in path.parent.iterdir())


def test_atomic_output_dir_appears_only_when_done(tmp_path):
    final = tmp_path / "out" / "model"
    with atomic_output_dir(final) as staging:
        (staging / "weights.bin").write_bytes(b"w")
        assert not final.exists()  # nothing to mistake for a finished output yet
    assert (final / "weights.bin").read_bytes() == b"w"
    assert siblings(final) == ["model"]


def test_atomic_output_dir_leaves_nothing_on_failure(tmp_path):
    final = tmp_path / "model"
    with pytest.raises(RuntimeError), atomic_output_dir(final) as staging:
        (staging / "half.bin").write_bytes(b"half")
        raise RuntimeError("crashed mid-write")
    assert siblings(final) == []


def test_atomic_output_dir_replaces_on_success_and_keeps_on_failure(tmp_path):
    final = tmp_path / "model"
    final.mkdir()
    (final / "old.bin").write_bytes(b"old")

    with pytest.raises(RuntimeError), atomic_output_dir(final) as staging:
        (staging / "new.bin").write_bytes(b"new")
        raise RuntimeError("crashed mid-write")
    assert sorted(p.name for p in final.iterdir()) == ["old.bin"]

    with atomic_output_dir(final) as staging:
        (staging / "new.bin").write_bytes(b"new")
    assert sorted(p.name for p in final.iterdir()) == ["new.bin"]
    assert siblings(final) == ["model"]


def test_atomic_output_dir_refuses_object_store_paths():
    with pytest.raises(ValueError, match="writes local folders"), atomic_output_dir("gs://b/x"):
        pass


# Rewrites one JSON file as fast as it can, each version a megabyte, until it is killed.
_REWRITER = """
import json, sys
from llm_pipeline.storage import write_atomic
print("ready", flush=True)
n = 0
while True:
    n += 1
    write_atomic(sys.argv[1], json.dumps({"n": n, "pad": "x" * 1_000_000}))
"""


def test_write_atomic_killed_at_any_moment_leaves_the_old_or_the_new_file(tmp_path):
    target = tmp_path / "state.json"
    write_atomic(target, json.dumps({"n": 0, "pad": ""}))
    seen = set()
    for delay in (0.0, 0.03, 0.07, 0.11, 0.19, 0.3):
        writer = subprocess.Popen(
            [sys.executable, "-c", _REWRITER, str(target)], stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        time.sleep(delay)
        writer.kill()
        writer.wait()
        value = json.loads(target.read_text(encoding="utf-8"))  # whole, or this raises
        assert value["pad"] in ("", "x" * 1_000_000)
        seen.add(value["n"])
    assert max(seen) > 0, "the writer never replaced the file: the test proved nothing"
    strays = [path for path in tmp_path.iterdir() if path != target]
    assert all(is_temp_file(path) for path in strays), strays


def test_write_atomic_that_fails_keeps_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "record.json"
    write_atomic(target, '{"version": 1}')
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, '{"version": "\ud800"}')  # a lone surrogate cannot be encoded
    assert target.read_text(encoding="utf-8") == '{"version": 1}'
    assert sorted(tmp_path.iterdir()) == [target]
