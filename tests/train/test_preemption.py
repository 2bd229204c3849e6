"""SIGTERM, as Spot preemption sends it, saves a checkpoint at the next step; a kill at any
moment of start-up leaves nothing that blocks the next run.

Real processes throughout: torchrun with 2 CPU ranks under ZeRO-3, DeepSpeed loading its
CPU communication op through torch's JIT loader, signals sent with os.kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.errors import PREEMPTED_EXIT_CODE, TrainError, TrainingPreempted
from llm_pipeline.train.checkpoints import MARKER
from llm_pipeline.train.job import WORKER_MODULE, FinetuneResult, run_finetune

pytestmark = pytest.mark.slow

MAX_STEPS, SAVE_STEPS = 20, 6
SHM_OP = "deepspeed_shm_comm"
DRIVER = Path(__file__).with_name("node_driver.py")


def _checkpoints(root: Path) -> dict[int, bool]:
    """Every checkpoint folder's step, and whether it is complete."""
    return {
        int(folder.name.split("-")[1]): (folder / MARKER).is_file()
        for folder in root.glob("run-*/checkpoint-*")
    }


def _complete(root: Path) -> list[int]:
    return sorted(step for step, complete in _checkpoints(root).items() if complete)


def _processes(marker: str) -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if marker in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _workers() -> list[psutil.Process]:
    return [p for p in _processes(WORKER_MODULE) if p not in _processes("torch.distributed.run")]


def _launcher() -> psutil.Process:
    launchers = _processes("torch.distributed.run")
    assert len(launchers) == 1, launchers
    return launchers[0]


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `processes` still running (a zombie waiting for its parent is gone)."""
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            continue
    return alive


def _wait_for(
    condition: Callable[[], Any], *, timeout: float, what: str, every: float = 0.02
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Attempt:
    """run_finetune in a thread, as a KFP step runs it, with its outcome kept."""

    def __init__(self, step_args: dict[str, Any]) -> None:
        self.result: FinetuneResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(step_args,), daemon=True)
        self.thread.start()

    def _run(self, step_args: dict[str, Any]) -> None:
        try:
            self.result = run_finetune(**step_args)
        except BaseException as err:
            self.error = err

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"run_finetune still running after {timeout} s"


@pytest.fixture
def step_args(
    tokenized_docstrings: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Callable[..., TrainConfig],
) -> dict[str, Any]:
    return {
        "dataset_dir": str(tokenized_docstrings),
        "output_dir": str(tmp_path / "model"),
        "model": tiny_t5_model,
        "train": train_settings(
            max_steps=MAX_STEPS, save_steps=SAVE_STEPS, save_total_limit=3, startup_timeout_s=240
        ),
        "cluster": ClusterConfig(processes=2),
        "env": dict(os.environ),
    }


def test_startup_kills_block_nothing_and_sigterm_saves_a_checkpoint_the_rerun_resumes(
    step_args: dict[str, Any],
) -> None:
    """Killed inside start-up twice on one folder, by SIGTERM (a preemption, which the step
    reports as one) and then by SIGKILL (which also leaves torch's build lock behind, as a
    loader killed inside the op load does): the second attempt starts its ranks, and the run
    after both trains, with the stale lock gone. That run is the first of the preemption
    sequence below (one 2-rank launch serves both checks): whatever either kill left that
    blocks would stop it."""
    checkpoints = Path(step_args["output_dir"]).parent / "checkpoints"
    lock = _build_lock()
    try:
        _kill_twice_during_startup(step_args)
        _sigterm_saves_a_checkpoint_that_the_rerun_resumes(step_args, checkpoints, lock)
    finally:
        lock.unlink(missing_ok=True)


def _kill_twice_during_startup(step_args: dict[str, Any]) -> None:
    """Start the run and kill both its ranks inside start-up, by SIGTERM, then by SIGKILL
    (leaving a stale build lock as a loader killed inside the op load does)."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        attempt = Attempt(step_args)
        workers = _wait_for(
            lambda: len(_workers()) == 2 and _workers(),
            timeout=60,
            what=f"the training processes of the attempt killed by {signum.name}",
        )
        time.sleep(4)  # inside start-up: imports done, joining the group, loading the op
        for worker in workers:
            os.kill(worker.pid, signum)
        attempt.join(90)
        assert isinstance(attempt.error, TrainError), attempt.error
        assert attempt.result is None
        if signum == signal.SIGTERM:
            assert isinstance(attempt.error, TrainingPreempted), attempt.error
        else:
            _leave_a_stale_build_lock()
            assert _build_lock().exists()


def _sigterm_saves_a_checkpoint_that_the_rerun_resumes(
    step_args: dict[str, Any], checkpoints: Path, lock: Path
) -> None:
    # 1. The run after the start-up kills trains (to its first checkpoint), the stale lock
    #    gone. SIGTERM then arrives while the stop's own save is being written, and the save
    #    does not finish (the VM is gone): the periodic checkpoint stays the newest complete.
    first = Attempt(step_args)
    _wait_for(lambda: SAVE_STEPS in _complete(checkpoints), timeout=240, what="a checkpoint")
    assert not lock.exists()
    launcher = _launcher()
    # Found before the signal: the kill must follow the first sight of the stop's folder at
    # once (a scan of /proc in between let a fast save finish first, and the kill then fell
    # on a complete checkpoint).
    processes = [launcher, *_workers()]
    os.kill(launcher.pid, signal.SIGTERM)
    partial = _wait_for(
        lambda: [s for s, done in _checkpoints(checkpoints).items() if s > SAVE_STEPS and not done],
        timeout=60,
        what="the stop's checkpoint folder",
        # A tiny model's save can finish within one 20 ms poll (it did once in CI, under
        # load): look every 2 ms, so that the kill falls inside the save.
        every=0.002,
    )
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    first.join(60)
    assert isinstance(first.error, TrainError), first.error
    assert _complete(checkpoints)[-1] == SAVE_STEPS
    assert not _checkpoints(checkpoints)[partial[0]], "a killed save must not look complete"

    # 2. SIGTERM mid-training with time to save: a complete checkpoint newer than the last
    #    periodic one, and a step that says so.
    second = Attempt(step_args)
    _wait_for(
        lambda: 2 * SAVE_STEPS in _complete(checkpoints), timeout=240, what="the second checkpoint"
    )
    os.kill(_launcher().pid, signal.SIGTERM)
    second.join(120)
    assert isinstance(second.error, TrainingPreempted), second.error
    assert second.error.exit_code == PREEMPTED_EXIT_CODE
    saved = _complete(checkpoints)[-1]
    assert 2 * SAVE_STEPS < saved < MAX_STEPS
    assert f"complete checkpoint at step {saved}" in str(second.error)
    assert not Path(step_args["output_dir"]).exists()

    # 3. The rerun resumes from it and finishes; every step is logged exactly once.
    result = run_finetune(**step_args)
    assert result.metrics["resumed_from_step"] == saved
    assert result.metrics["global_step"] == MAX_STEPS
    logged = [entry["step"] for entry in result.log_history if "loss" in entry]
    assert logged == list(range(1, MAX_STEPS + 1))
    assert partial[0] not in _checkpoints(checkpoints) or partial[0] == saved


def _build_lock() -> Path:
    """The FileBaton path torch's JIT loader takes for DeepSpeed's CPU communication op."""
    from llm_pipeline.train.op_builds import build_folder

    return build_folder(SHM_OP) / "lock"


def _leave_a_stale_build_lock() -> None:
    """What a loader SIGKILLed inside the op load leaves: torch's own FileBaton, taken by a
    process that then dies without releasing it."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from torch.utils.file_baton import FileBaton\n"
            f"assert FileBaton({str(_build_lock())!r}).try_acquire()\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()


def test_a_hung_startup_fails_naming_where_it_waits(
    step_args: dict[str, Any], train_settings: Callable[..., TrainConfig]
) -> None:
    """The watchdog ends a start-up that waits past train.startup_timeout_s, and says where."""
    step_args["train"] = train_settings(max_steps=2, startup_timeout_s=10)
    faults = Path(__file__).parent / "faults"
    env = dict(step_args["env"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(faults), env.get("PYTHONPATH")]))
    env["LLM_PIPELINE_TEST_FAULT"] = "1:hang-startup"
    step_args["env"] = env
    started = time.monotonic()

    with pytest.raises(TrainError) as failure:
        run_finetune(**step_args)

    assert time.monotonic() - started < 90
    message = str(failure.value)
    assert "did not start training within train.startup_timeout_s (10 s)" in message
    assert "process_group.join(spec)" in message


def _start_step_process(step_args: dict[str, Any], folder: Path) -> subprocess.Popen[bytes]:
    """run_finetune in a process of its own, as KFP runs a step (tests/train/node_driver.py)."""
    args = folder / "step.json"
    args.write_text(
        json.dumps(
            {
                "dataset_dir": step_args["dataset_dir"],
                "output_dir": step_args["output_dir"],
                "model": step_args["model"].model_dump(mode="json"),
                "train": step_args["train"].model_dump(mode="json"),
                "cluster": step_args["cluster"].model_dump(mode="json"),
                "result": str(folder / "result.json"),
            }
        )
    )
    env = {k: v for k, v in step_args["env"].items() if k != "CLUSTER_SPEC"}
    with (folder / "step.log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, str(DRIVER), str(args)], env=env, stdout=log, stderr=log
        )


def test_nothing_trains_on_after_its_step_or_launcher_is_killed(
    step_args: dict[str, Any], tmp_path: Path
) -> None:
    """The step's process SIGKILLed (OOM, kill -9), then torchrun SIGKILLed: each time the
    processes below it stop within seconds instead of training on as orphans in the folder
    the rerun resumes from; while they live, they hold that folder against a second run."""
    checkpoints = Path(step_args["output_dir"]).parent / "checkpoints"

    # 1. The step process dies: torchrun and both ranks follow. Before that, with its ranks
    #    frozen (as busy ones would be), a second run on the same folder is refused by name.
    step = _start_step_process(step_args, tmp_path)
    try:
        _wait_for(lambda: SAVE_STEPS in _complete(checkpoints), timeout=240, what="a checkpoint")
        started = psutil.Process(step.pid).children(recursive=True)
        assert len(started) == 3, started  # torchrun and its two ranks
        workers = _workers()
        for worker in workers:
            worker.suspend()
        with pytest.raises(TrainError) as refused:
            run_finetune(**step_args)
        message = str(refused.value)
        assert "is in use by another training run" in message
        assert any(f"pid {w.pid} on host {socket.gethostname()}" in message for w in workers)
        for worker in workers:
            worker.resume()
    finally:
        step.kill()
        step.wait()
    killed = time.monotonic()
    _wait_for(lambda: not _alive(started), timeout=30, what="torchrun and the ranks to stop")
    assert time.monotonic() - killed < 30

    # 2. The rerun resumes; then its torchrun dies: its ranks follow, the step fails.
    second = Attempt(step_args)
    _wait_for(
        lambda: 2 * SAVE_STEPS in _complete(checkpoints), timeout=240, what="the second checkpoint"
    )
    launcher, workers = _launcher(), _workers()
    assert len(workers) == 2
    launcher.kill()
    killed = time.monotonic()
    _wait_for(lambda: not _alive(workers), timeout=30, what="the ranks to stop")
    assert time.monotonic() - killed < 30
    second.join(60)
    assert isinstance(second.error, TrainError), second.error

    # 3. Nothing left holds the folder or writes into it: the next run resumes and finishes.
    result = run_finetune(**step_args)
    assert result.metrics["resumed_from_step"] >= 2 * SAVE_STEPS
    assert result.metrics["global_step"] == MAX_STEPS
