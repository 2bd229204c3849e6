"""`pipeline.py clean` and what a run says it keeps: old runs' data, models and checkpoints
go, with KFP's cache entries that name them; reports, logs, the evaluation, the registry and
the newest run stay; `--dry-run` removes nothing. Run folders are built here as KFP's local
runner lays them out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from llm_pipeline.cli import main
from llm_pipeline.local.cleanup import plan_cleanup
from llm_pipeline.local.disk import format_size, kept_on_disk, last_checkpoint
from llm_pipeline.local.scratch import PREFIX, run_scratch_folder

MB = 1_000_000


def _key(stamp: str) -> str:
    """A KFP cache key (hex) for the run started at `stamp`."""
    return "ca" + stamp.replace("-", "")


def _run(root: Path, stamp: str, *, checkpoints: int = 2) -> Path:
    """A finished run's folder: data, tokenized data, a model, checkpoints, the evaluation,
    its report and log, each written a minute after the run started (`stamp`, which its name
    holds, as KFP names it); and the KFP cache entry for its download step."""
    started = datetime.strptime(f"2020-01-01-{stamp}", "%Y-%m-%d-%H-%M-%S").timestamp()
    run = root / f"llm-pipeline-local-2020-01-01-{stamp}-000001"
    files = {
        "download/dataset/train/data.arrow": MB,
        "download/metrics": 10,
        "download/executor_output.json": 10,
        "preprocess/tokenized/train/data.arrow": MB,
        "finetune/trained_model/model.safetensors": 2 * MB,
        "finetune/logs/events.out": 100,
        "evaluate/predictions/predictions.jsonl": 1000,
        "evaluate/report": 1000,
        "report.html": 5000,
        "pipeline.log": 5000,
    }
    for step in range(1, checkpoints + 1):
        files[f"finetune/checkpoints/run-abc/checkpoint-{step}/model.safetensors"] = 3 * MB
        files[f"finetune/checkpoints/run-abc/checkpoint-{step}/COMPLETE.json"] = 2
    for name, size in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"x" * size)
    for path in [run, *run.rglob("*")]:
        os.utime(path, (started + 60, started + 60))
    cache = root / ".kfp_cache"
    cache.mkdir(exist_ok=True)
    entry = {"dataset": {"uri": str(run / "download" / "dataset")}}
    (cache / f"{_key(stamp)}.json").write_text(json.dumps(entry))
    return run


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The pipeline root, an old run and the newest, with the registry in the root too (its
    default place, runs/registry)."""
    root = tmp_path / "runs"
    old, new = _run(root, "08-00-00"), _run(root, "09-00-00")
    (root / "registry" / "models" / "m" / "1").mkdir(parents=True)
    (root / "registry" / "models" / "m" / "1" / "model.safetensors").write_bytes(b"x" * MB)
    return root, old, new


def test_clean_removes_old_runs_data_models_and_checkpoints_only(
    runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    root, old, _new = runs
    planned = plan_cleanup(root, keep=1, temp_dir=tmp_path / "no-temp")
    assert sorted(str(r.path.relative_to(root)) for r in planned) == sorted(
        [
            f"{old.name}/download/dataset",
            f"{old.name}/preprocess/tokenized",
            f"{old.name}/finetune/checkpoints",
            f"{old.name}/finetune/logs",
            f"{old.name}/finetune/trained_model",
            f".kfp_cache/{_key('08-00-00')}.json",
        ]
    )
    assert sum(r.size for r in planned) > 10 * MB


def test_checkpoints_a_kept_run_resumed_from_stay(
    runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A run resumed from a stopped one's checkpoints (`--set train.checkpoint_dir=...`, as
    the stop line prints) uses them in the stopped run's folder: its resolved config says so."""
    root, old, new = runs
    resolved = new / "configure" / "resolved"
    resolved.parent.mkdir()
    used = old / "finetune" / "checkpoints"
    resolved.write_text(json.dumps({"train": {"checkpoint_dir": str(used)}}))
    planned = [r.path for r in plan_cleanup(root, keep=1, temp_dir=tmp_path / "no-temp")]
    assert used not in planned
    assert old / "finetune" / "trained_model" in planned
    resolved.write_text(json.dumps({"train": {"checkpoint_dir": None}}))
    planned = [r.path for r in plan_cleanup(root, keep=1, temp_dir=tmp_path / "no-temp")]
    assert used in planned


def test_outputs_a_kept_run_reused_from_the_cache_stay(
    runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The newest run was served the old run's download from KFP's cache: its log says so. A
    resume of it needs the same data folder (the checkpoints' fingerprint holds its path)."""
    root, old, new = runs
    key = _key("08-00-00")
    log = f"09:00:01.000 - INFO - Task download cache hit (key={key}); skipping execution."
    (new / "pipeline.log").write_text(log + "\n")
    planned = [r.path for r in plan_cleanup(root, keep=1, temp_dir=tmp_path / "no-temp")]
    assert old / "download" / "dataset" not in planned
    assert root / ".kfp_cache" / f"{key}.json" not in planned
    assert old / "preprocess" / "tokenized" in planned


def test_clean_command_dry_run_then_for_real(
    runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, old, new = runs
    assert main(["clean", "--pipeline-root", str(root), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "Would free 10 MB (dry run: nothing removed)." in dry
    assert (old / "finetune" / "checkpoints").is_dir()

    assert main(["clean", "--pipeline-root", str(root)]) == 0
    assert "Freed 10 MB." in capsys.readouterr().out
    assert not (old / "finetune" / "checkpoints").exists()
    assert not (old / "download" / "dataset").exists()
    for kept in ["report.html", "pipeline.log", "evaluate/predictions", "download/metrics"]:
        assert (old / kept).exists(), kept
    assert (new / "finetune" / "checkpoints" / "run-abc" / "checkpoint-2").is_dir()
    assert (root / "registry" / "models" / "m" / "1" / "model.safetensors").is_file()
    assert sorted(p.name for p in (root / ".kfp_cache").iterdir()) == [f"{_key('09-00-00')}.json"]

    assert main(["clean", "--pipeline-root", str(root)]) == 0
    assert "Nothing to remove" in capsys.readouterr().out


def test_clean_keep_zero_takes_the_newest_run_too(runs: tuple[Path, Path, Path]) -> None:
    root, _old, new = runs
    assert main(["clean", "--pipeline-root", str(root), "--keep", "0"]) == 0
    assert not (new / "finetune" / "checkpoints").exists()


def test_a_run_that_may_still_be_running_is_left_alone(
    runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    root, old, _ = runs
    (old / "pipeline.log").unlink()  # the log moves into the folder when the run ends
    assert plan_cleanup(root, keep=1, temp_dir=tmp_path / "no-temp") == []
    past = time.time() - 3600
    for path in [old, *old.glob("*/*")]:
        os.utime(path, (past, past))
    assert plan_cleanup(root, keep=1, temp_dir=tmp_path / "no-temp")  # a killed run's


def test_clean_refuses_a_root_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["clean", "--pipeline-root", str(tmp_path / "nope")]) == 2
    assert f"--pipeline-root: {tmp_path / 'nope'} is not a folder" in capsys.readouterr().err


def test_clean_removes_kfps_temporary_folders_and_abandoned_scratch_only(
    tmp_path: Path,
) -> None:
    temp, root = tmp_path / "temp", tmp_path / "runs"
    root.mkdir()
    (temp / "tmp.kfpLeft").mkdir(parents=True)
    (temp / "tmp.kfpLeft" / "ephemeral_component.py").write_text("def f(): ...")
    hours_ago = time.time() - 2 * 3600
    os.utime(temp / "tmp.kfpLeft" / "ephemeral_component.py", (hours_ago, hours_ago))
    (temp / "tmp.kfpNow").mkdir()  # a KFP run's step about to import it: not a leftover
    (temp / "tmp.kfpNow" / "ephemeral_component.py").write_text("def f(): ...")
    (temp / "tmp.someoneElse").mkdir()
    (temp / "tmp.someoneElse" / "notes.txt").write_text("mine")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    (temp / f"{PREFIX}{gone.stdout.strip()}-abc").mkdir()  # its run's pid has ended
    (temp / f"{PREFIX}{os.getpid()}-live").mkdir()  # this process: a run going on
    planned = {r.path.name for r in plan_cleanup(root, temp_dir=temp)}
    assert planned == {"tmp.kfpLeft", f"{PREFIX}{gone.stdout.strip()}-abc"}


def test_steps_temporary_files_go_with_the_run_however_it_ends(tmp_path: Path) -> None:
    """Processes started during the run make their temporary folders (KFP's `mktemp -d`
    among them) in the run's scratch folder, which is gone afterwards, after an error too."""
    before = os.environ.get("TMPDIR")
    with pytest.raises(RuntimeError), run_scratch_folder(tmp_path) as scratch:
        made = subprocess.run(["mktemp", "-d"], check=True, capture_output=True, text=True)
        assert Path(made.stdout.strip()).parent == scratch
        raise RuntimeError("a step failed")
    assert not scratch.exists() and list(tmp_path.iterdir()) == []
    assert os.environ.get("TMPDIR") == before


def test_what_a_run_keeps_is_measured_and_the_last_complete_checkpoint_found(
    runs: tuple[Path, Path, Path],
) -> None:
    _, _, new = runs
    folder = new / "finetune" / "checkpoints" / "run-abc"
    incomplete = folder / "checkpoint-3"
    incomplete.mkdir()  # a save cut short: no marker
    assert last_checkpoint(new / "finetune" / "checkpoints") == folder / "checkpoint-2"
    kept = kept_on_disk(new)
    assert kept.describe() == (
        f"Kept on disk: 10 MB in {new} (checkpoints 6.0 MB of it, in "
        f"{new / 'finetune' / 'checkpoints'})."
    )
    # A run shorter than save_steps: its checkpoints' folder holds a rank's lock file alone.
    shutil.rmtree(new / "finetune" / "checkpoints")
    (new / "finetune" / "checkpoints" / "run-abc" / ".locks").mkdir(parents=True)
    (new / "finetune" / "checkpoints" / "run-abc" / ".locks" / "rank-0").write_text("x" * 75)
    assert "checkpoints" not in kept_on_disk(new).describe()
    assert [format_size(n) for n in (999, 1500, 25 * MB, 1_234_000_000)] == [
        "999 B",
        "1.5 kB",
        "25 MB",
        "1.2 GB",
    ]


def test_a_clean_killed_on_the_way_leaves_no_cache_entry_naming_what_it_removed(
    runs: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache entries went last: a clean killed while it removed an old run's data left
    the entry naming that folder, half gone, and the next run was served from it."""
    from llm_pipeline.local import cleanup

    root = runs[0]
    before = {path for path in root.rglob("*") if path.is_file()}
    removals = plan_cleanup(root, keep=1, temp_dir=tmp_path / "no-temp")

    def killed_while_removing(path: Path, ignore_errors: bool = False) -> None:
        next(file for file in sorted(Path(path).rglob("*")) if file.is_file()).unlink()
        raise KeyboardInterrupt  # as the kill would stop it: part of the folder gone

    monkeypatch.setattr(cleanup.shutil, "rmtree", killed_while_removing)
    with pytest.raises(KeyboardInterrupt):
        cleanup.remove(removals)
    for entry in (root / ".kfp_cache").glob("*.json"):
        for output in json.loads(entry.read_text()).values():
            named = Path(output["uri"])
            assert all(file.exists() for file in before if file.is_relative_to(named)), entry
