"""Checkpoint folders: the marker decides completeness; rotation and cleanup respect it."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.errors import TrainError, UnsafePathError
from llm_pipeline.train import checkpoints, lease
from llm_pipeline.train.checkpoints import MARKER


def _checkpoint(folder: Path, step: int, *, complete: bool) -> Path:
    path = folder / f"checkpoint-{step}"
    (path / f"global_step{step}").mkdir(parents=True)
    (path / f"global_step{step}" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"x")
    (path / "trainer_state.json").write_text("{}")
    if complete:
        checkpoints.write_marker(str(path), step=step, world_size=2, fingerprint="f")
    return path


def test_only_marked_folders_are_complete(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 5, complete=True)
    _checkpoint(tmp_path, 10, complete=False)
    (tmp_path / "checkpoint-x").mkdir()  # not a step: ignored
    found = checkpoints.list_checkpoints(str(tmp_path))
    assert [(c.step, c.complete) for c in found] == [(5, True), (10, False)]
    assert checkpoints.complete_steps(str(tmp_path)) == [5]
    marker = json.loads((tmp_path / "checkpoint-5" / MARKER).read_text())
    assert marker["step"] == 5 and marker["world_size"] == 2
    assert not list(tmp_path.glob("checkpoint-5/*.tmp-*")), "the marker is renamed into place"


def test_a_missing_folder_has_no_checkpoints(tmp_path: Path) -> None:
    assert checkpoints.list_checkpoints(str(tmp_path / "absent")) == []


def test_rotation_keeps_the_newest_complete_and_a_newer_partial(tmp_path: Path) -> None:
    for step in (5, 10, 15, 20):
        _checkpoint(tmp_path, step, complete=True)
    _checkpoint(tmp_path, 3, complete=False)  # an old crash leftover
    _checkpoint(tmp_path, 25, complete=False)  # a save in progress
    deleted = checkpoints.rotate(str(tmp_path), keep=2)
    assert sorted(deleted) == [3, 5, 10]
    assert [c.step for c in checkpoints.list_checkpoints(str(tmp_path))] == [15, 20, 25]


def test_rotation_never_deletes_the_only_complete_checkpoint(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 5, complete=True)
    assert checkpoints.rotate(str(tmp_path), keep=1) == []
    assert checkpoints.complete_steps(str(tmp_path)) == [5]


def test_before_resuming_partial_and_newer_checkpoints_go(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 5, complete=True)
    _checkpoint(tmp_path, 10, complete=False)
    _checkpoint(tmp_path, 15, complete=True)  # complete on this node only, say
    assert sorted(checkpoints.remove_all_but(str(tmp_path), keep_step=5)) == [10, 15]
    assert checkpoints.complete_steps(str(tmp_path)) == [5]
    assert checkpoints.remove_all_but(str(tmp_path), keep_step=None) == [5]


def test_checkpoint_root_prefers_vertex_then_config_then_beside_the_output() -> None:
    vertex = {"AIP_CHECKPOINT_DIR": "gs://b/job/checkpoints/"}
    assert (
        checkpoints.resolve_checkpoint_root(vertex, configured="/c", output_dir="/o/model")
        == "gs://b/job/checkpoints"
    )
    assert checkpoints.resolve_checkpoint_root({}, configured="/c", output_dir="/o/m") == "/c"
    assert checkpoints.resolve_checkpoint_root({}, configured=None, output_dir="/o/m") == (
        "/o/checkpoints"
    )


def test_a_vertex_checkpoint_dir_on_a_store_without_a_lease_is_refused() -> None:
    with pytest.raises(TrainError, match="AIP_CHECKPOINT_DIR: 's3://b/c': checkpoints go to"):
        checkpoints.resolve_checkpoint_root(
            {"AIP_CHECKPOINT_DIR": "s3://b/c"}, configured=None, output_dir="/o/m"
        )
    with pytest.raises(ValueError, match="the checkpoint lease needs Cloud Storage"):
        lease.acquire("memory://bucket/run", job=None)


def test_fingerprint_ignores_how_often_things_are_saved_not_what_is_trained() -> None:
    model = ModelConfig(source="t5-small")

    def fingerprint(world_size: int = 2, **train: object) -> str:
        return checkpoints.run_fingerprint(
            model=model, train=TrainConfig(**train), dataset_dir="/d", world_size=world_size
        )

    base = fingerprint()
    assert fingerprint(save_steps=7, logging_steps=3, checkpoint_dir="/x") == base
    assert fingerprint(learning_rate=1e-4) != base
    assert fingerprint(world_size=4) != base


def test_rank_files_are_told_from_shared_ones() -> None:
    assert checkpoints.rank_of_file("global_step5/zero_pp_rank_3_mp_rank_00_optim_states.pt") == 3
    assert checkpoints.rank_of_file("rng_state_12.pth") == 12
    assert checkpoints.rank_of_file("trainer_state.json") is None
    assert checkpoints.step_of("gs://b/run-x/checkpoint-40/") == 40
    with pytest.raises(ValueError):
        checkpoints.step_of("/tmp/run-x")


def test_upload_and_download_split_files_by_rank(tmp_path: Path) -> None:
    local = tmp_path / "checkpoint-5"
    (local / "global_step5").mkdir(parents=True)
    for rank in (0, 1, 2, 3):
        (local / "global_step5" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_text(
            str(rank)
        )
        (local / f"rng_state_{rank}.pth").write_text(str(rank))
    (local / "trainer_state.json").write_text("{}")
    remote = "memory://bucket/run/checkpoint-5"

    # A non-primary node sends only its ranks' files; the primary sends the shared ones too.
    assert checkpoints.upload(local, remote, shared_files=False) == 8
    fs = fsspec.filesystem("memory")
    assert not fs.exists("/bucket/run/checkpoint-5/trainer_state.json")
    assert checkpoints.upload(local, remote, shared_files=True) == 9
    checkpoints.write_marker(remote, step=5, world_size=4, fingerprint="f")
    assert checkpoints.complete_steps("memory://bucket/run") == [5]

    fetched = tmp_path / "node1"
    assert checkpoints.download(remote, fetched, ranks=range(2, 4)) == 5
    names = sorted(p.relative_to(fetched).as_posix() for p in fetched.rglob("*") if p.is_file())
    assert names == [
        "global_step5/zero_pp_rank_2_mp_rank_00_optim_states.pt",
        "global_step5/zero_pp_rank_3_mp_rank_00_optim_states.pt",
        "rng_state_2.pth",
        "rng_state_3.pth",
        "trainer_state.json",
    ]
    checkpoints.delete_checkpoint(remote)
    assert checkpoints.list_checkpoints("memory://bucket/run") == []


@pytest.mark.parametrize(
    "planted",
    ["global_step5/../../../../ESCAPED.pt", "../checkpoint-4/rng_state_0.pth"],
    ids=["dotdot-deep", "sibling"],
)
def test_download_refuses_a_key_that_leaves_the_checkpoint_and_writes_nothing(
    tmp_path: Path, planted: str
) -> None:
    """Every rank resumes from what a download writes: a tampered bucket must not place
    files (a module imported later, say) anywhere else on the training machine."""
    remote = "memory://tampered/run/checkpoint-5"
    fs = fsspec.filesystem("memory")
    fs.pipe("/tampered/run/checkpoint-5/trainer_state.json", b"{}")
    fs.pipe(f"/tampered/run/checkpoint-5/{planted}", b"bytes from whoever can write the bucket")
    local = tmp_path / "a" / "b" / "c" / "d" / "checkpoint-5"
    try:
        with pytest.raises(UnsafePathError, match=f"object key '{planted}'"):
            checkpoints.download(remote, local, ranks=[0])
    finally:
        fs.rm("/tampered", recursive=True)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("tag", ["../../../tmp/elsewhere", "/etc", "global_step5/../.."])
def test_a_latest_tag_naming_anything_but_a_global_step_folder_is_refused(
    tmp_path: Path, tag: str
) -> None:
    checkpoint = _checkpoint(tmp_path, 5, complete=True)
    (checkpoint / checkpoints.LATEST_TAG).write_text("global_step5\n")
    checkpoints.check_latest_tag(checkpoint)

    (checkpoint / checkpoints.LATEST_TAG).write_text(tag)

    with pytest.raises(UnsafePathError, match=r"latest file names .*not a global_step"):
        checkpoints.check_latest_tag(checkpoint)
