"""Paths through fsspec (local, gs:// on the emulator, /gcs/) and outputs that appear whole."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest

from llm_pipeline import storage
from llm_pipeline.output_files import Step
from llm_pipeline.storage import (
    GCS_MOUNT,
    OUTPUT_MARKER,
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


# What gcsfuse answers when asked to rename a folder that holds objects, with its default
# `--rename-dir-limit` of 0 (internal/fs/fs.go, renameNonHierarchicalDir: "too many objects
# to be renamed: EMFILE"); files rename (copy, then delete) and empty folders rename.
_GCSFUSE_RENAME = """
import errno, os
from pathlib import Path
from llm_pipeline import storage

def gcsfuse_like(mount):
    real_rename, real_replace = os.rename, os.replace
    storage.GCS_MOUNT = mount

    def refuse_full_folders(real):
        def rename(src, dst, *args, **kwargs):
            source = Path(src)
            if source.is_relative_to(mount) and source.is_dir() and any(source.iterdir()):
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(src))
            return real(src, dst, *args, **kwargs)
        return rename

    os.rename = refuse_full_folders(real_rename)
    os.replace = refuse_full_folders(real_replace)
"""


@pytest.fixture
def gcs_mount(tmp_path, monkeypatch):
    """A folder standing for Vertex's /gcs/ mount, whose folder renames fail as gcsfuse's do."""
    mount = tmp_path / "gcs"
    (mount / "bucket").mkdir(parents=True)
    space: dict = {}
    exec(_GCSFUSE_RENAME, space)
    with monkeypatch.context() as patch:
        patch.setattr(storage, "GCS_MOUNT", mount)
        patch.setattr(os, "rename", os.rename)
        patch.setattr(os, "replace", os.replace)
        space["gcsfuse_like"](mount)
        yield mount


def test_the_fake_mount_refuses_folder_renames_as_gcsfuse_does(gcs_mount):
    full = gcs_mount / "bucket" / "full"
    full.mkdir()
    (full / "f").write_text("x")
    with pytest.raises(OSError) as refused:
        os.rename(full, gcs_mount / "bucket" / "moved")
    assert refused.value.errno == errno.EMFILE


def test_reads_from_the_gcs_mount_are_copied_to_local_disk(gcs_mount, tmp_path):
    data = gcs_mount / "bucket" / "tokenized"
    (data / "train").mkdir(parents=True)
    (data / "train" / "data.arrow").write_bytes(b"rows")
    assert not is_remote(data), "written through the mount as a path"

    copy = local_copy(data, tmp_path / "local")

    assert copy == tmp_path / "local" / "tokenized"
    assert (copy / "train" / "data.arrow").read_bytes() == b"rows"
    assert local_copy(tmp_path / "local", tmp_path / "again") == tmp_path / "local"


def test_outputs_on_the_gcs_mount_are_written_in_place_with_a_marker_last(gcs_mount):
    final = gcs_mount / "bucket" / "run" / "model"
    with atomic_output_dir(final) as folder:
        (folder / "old.bin").write_bytes(b"old")
    assert sorted(p.name for p in final.iterdir()) == [OUTPUT_MARKER, "old.bin"]

    with pytest.raises(RuntimeError), atomic_output_dir(final) as folder:
        (folder / "half.bin").write_bytes(b"half")
        raise RuntimeError("crashed mid-write")
    assert list(final.iterdir()) == [], "no marker, and nothing half-written left"

    with atomic_output_dir(final) as folder:
        assert folder == final
        (folder / "new.bin").write_bytes(b"new")
    assert sorted(p.name for p in final.iterdir()) == [OUTPUT_MARKER, "new.bin"]
    assert siblings(final) == ["model"]


# Saves a DatasetDict as a step's output on the mount, and is killed before it ends.
_KILLED_WRITER = (
    _GCSFUSE_RENAME
    + """
import signal, sys
import datasets
gcsfuse_like(Path(sys.argv[1]))
with storage.atomic_output_dir(sys.argv[2]) as folder:
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"x": [1, 2]})}).save_to_disk(
        str(folder)
    )
    os.kill(os.getpid(), signal.SIGKILL)
"""
)


def test_a_step_output_killed_before_its_marker_is_refused(gcs_mount):
    import datasets

    from llm_pipeline.data.saved import load_saved_dataset
    from llm_pipeline.errors import DataError

    final = gcs_mount / "bucket" / "download" / "dataset"
    killed = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(gcs_mount), str(final)])
    assert killed.returncode == -signal.SIGKILL
    assert (final / "dataset_dict.json").is_file(), "every file written, the marker not"

    with pytest.raises(DataError, match=f"unfinished: it has no {OUTPUT_MARKER}"):
        load_saved_dataset(final, made_by=Step.DOWNLOAD, error=DataError)

    with atomic_output_dir(final) as folder:
        datasets.DatasetDict({"train": datasets.Dataset.from_dict({"x": [3]})}).save_to_disk(
            str(folder)
        )
    assert load_saved_dataset(final, made_by=Step.DOWNLOAD, error=DataError)["train"]["x"] == [3]


def test_evaluate_refuses_a_model_folder_its_finetune_step_did_not_finish(gcs_mount, tmp_path):
    from llm_pipeline.config.evaluate import EvaluateConfig
    from llm_pipeline.errors import EvaluationError
    from llm_pipeline.evaluation.evaluate_model import evaluate_in_processes

    model = gcs_mount / "bucket" / "finetune" / "trained_model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    with pytest.raises(EvaluationError, match="the finetune step's output is unfinished"):
        evaluate_in_processes(
            model_dir=model,
            dataset_dir=tmp_path / "unused",
            config=EvaluateConfig(processes=1),
            output_dir=gcs_mount / "bucket" / "evaluate" / "predictions",
        )


def test_what_a_killed_atomic_output_dir_leaves_is_found_beside_the_output(
    tmp_path: Path,
) -> None:
    """`abandoned_staging` names the staging folder of a writer that died without cleanup
    (os._exit, as SIGKILL), and nothing else beside the output."""
    final = tmp_path / "out"
    killed = (
        "import os, sys\n"
        "from llm_pipeline.storage import atomic_output_dir\n"
        "with atomic_output_dir(sys.argv[1]) as staging:\n"
        "    (staging / 'part').write_text('half')\n"
        "    os._exit(9)\n"
    )
    assert subprocess.run([sys.executable, "-c", killed, str(final)]).returncode == 9
    (tmp_path / ".out-notes").mkdir()
    (tmp_path / ".other.tmp-0123abcd").mkdir()
    (leftover,) = storage.abandoned_staging(final)
    assert (leftover / "part").read_text() == "half" and not final.exists()
