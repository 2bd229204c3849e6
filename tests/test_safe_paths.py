"""Names from a bucket never become local paths outside their folder: object keys planted with
`..` or a leading `/` on fsspec's in-memory filesystem, symbolic links on the /gcs/ mount."""

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from llm_pipeline import storage
from llm_pipeline.errors import UnsafePathError
from llm_pipeline.safe_paths import copy_tree, path_inside
from llm_pipeline.storage import local_copy

#: Keys a tampered bucket could hold under a model folder, and why each is refused.
PLANTED = {
    "x/../../../../ESCAPED.txt": "has a '..' part",
    "../ESCAPED.txt": "has a '..' part",
    "/ESCAPED.txt": "is absolute",
}


@pytest.fixture
def bucket() -> Iterator[str]:
    """A fresh folder on fsspec's in-memory filesystem (one store per process)."""
    root = f"/bucket-{uuid.uuid4().hex[:8]}"
    yield root
    fs = fsspec.filesystem("memory")
    for key in list(fs.store):
        if key.startswith(root):
            del fs.store[key]


@pytest.mark.parametrize("planted", list(PLANTED))
def test_a_remote_copy_refuses_keys_that_leave_its_folder_and_writes_nothing(
    bucket: str, tmp_path: Path, planted: str
) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{bucket}/model/config.json", b"{}")
    fs.pipe(f"{bucket}/model/{planted}", b"written by whoever can write the bucket")
    dest = tmp_path / "a" / "b" / "c" / "d" / "copy"

    with pytest.raises(UnsafePathError) as refused:
        local_copy(f"memory://{bucket}/model", dest)

    message = str(refused.value)
    assert f"memory://{bucket}/model: object key {planted!r} {PLANTED[planted]}" in message
    assert list(tmp_path.rglob("ESCAPED.txt")) == []
    assert not (dest / "model" / "config.json").exists(), "checked before anything is copied"


def test_a_remote_copy_keeps_ordinary_names_and_nested_folders(bucket: str, tmp_path: Path):
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{bucket}/model/config.json", b"{}")
    fs.pipe(f"{bucket}/model/tokenizer/..vocab", b"dots in a name are fine")

    copy = local_copy(f"memory://{bucket}/model", tmp_path)

    assert (copy / "tokenizer" / "..vocab").read_bytes() == b"dots in a name are fine"
    assert (copy / "config.json").read_bytes() == b"{}"


def test_a_name_that_resolves_outside_through_a_link_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "dest"
    folder.mkdir()
    (folder / "escape").symlink_to(tmp_path)

    assert path_inside(folder, "a/b.txt", where="w", what="name") == folder / "a" / "b.txt"
    with pytest.raises(UnsafePathError, match="'escape/x' resolves outside it"):
        path_inside(folder, "escape/x", where="w", what="name")
    with pytest.raises(UnsafePathError, match="is not a text name"):
        path_inside(folder, ["train"], where="w", what="name")


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_copy_from_the_gcs_mount_refuses_links_rather_than_follow_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """gcsfuse shows an object carrying `gcsfuse_symlink_target` as a symbolic link: followed,
    it would copy a file of this machine (a key, /proc/self/environ) into the model folder."""
    mount = tmp_path / "gcs"
    monkeypatch.setattr(storage, "GCS_MOUNT", mount)
    model = mount / "bucket" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("private")
    target = secret if kind == "folder" else secret / "key"
    (model / "tokenizer").symlink_to(target)

    with pytest.raises(UnsafePathError, match=f"{model / 'tokenizer'}: a symbolic link"):
        local_copy(model, tmp_path / "local")
    if kind == "file":  # a single file copied down, as the fit check reads a config.json
        with pytest.raises(UnsafePathError, match=f"{model / 'tokenizer'}: a symbolic link"):
            local_copy(model / "tokenizer", tmp_path / "local")

    assert [p for p in (tmp_path / "local").rglob("*") if p.name in ("key", "tokenizer")] == []


def test_copy_tree_copies_files_and_folders_not_links_to_them(tmp_path: Path) -> None:
    source = tmp_path / "run"
    (source / "tokenizer").mkdir(parents=True)
    (source / "tokenizer" / "vocab.txt").write_text("a b c")
    (source / "model.safetensors").write_bytes(b"\x00weights")
    os.utime(source / "model.safetensors", ns=(1_000_000_000, 2_000_000_000))

    copy_tree(source, tmp_path / "copy")

    copied = tmp_path / "copy" / "model.safetensors"
    assert copied.read_bytes() == b"\x00weights"
    assert copied.stat().st_ino != (source / "model.safetensors").stat().st_ino
    assert copied.stat().st_mtime_ns == 2_000_000_000
    assert (tmp_path / "copy" / "tokenizer" / "vocab.txt").read_text() == "a b c"
    os.mkfifo(source / "pipe")
    with pytest.raises(UnsafePathError, match="pipe: neither a file nor a folder"):
        copy_tree(source, tmp_path / "again")
