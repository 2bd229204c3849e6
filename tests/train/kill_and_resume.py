"""Killing one rank of a running finetune step once a checkpoint is complete: what the tests
that resume a killed run share (tests/train/test_resume.py, test_classifier_resume.py)."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from llm_pipeline.train.checkpoints import MARKER
from llm_pipeline.train.job import WORKER_MODULE, run_finetune


def complete_checkpoints(root: Path) -> dict[int, Path]:
    """The checkpoints under `root` that carry their completion marker, by step."""
    return {
        int(marker.parent.name.split("-")[1]): marker.parent
        for marker in root.glob(f"run-*/checkpoint-*/{MARKER}")
    }


def worker(local_rank: int) -> psutil.Process | None:
    """This test's training process of `local_rank`, if it is running."""
    for child in psutil.Process().children(recursive=True):
        try:
            if WORKER_MODULE in " ".join(child.cmdline()) and child.environ().get(
                "LOCAL_RANK"
            ) == str(local_rank):
                return child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def kill_rank_after_a_checkpoint(
    step_args: dict[str, Any],
    *,
    checkpoints: Path,
    max_steps: int,
    capfd: pytest.CaptureFixture[str],
    timeout_s: float = 240,
) -> tuple[BaseException | None, dict[int, float]]:
    """Run the finetune step with `step_args`, SIGKILL its rank 1 once a checkpoint is
    complete and a later step has logged, and wait for the step to fail.

    Returns the step's error (None if it did not fail) and the loss the primary's status
    lines gave for every step the first attempt logged.
    """
    status = re.compile(rf"step (\d+)/{max_steps} · loss (\d+\.\d+)")
    outcome: dict[str, Any] = {}
    echoed = ""

    def first_losses() -> dict[int, float]:
        nonlocal echoed
        echoed += capfd.readouterr().out
        return {int(step): float(loss) for step, loss in status.findall(echoed)}

    def first_attempt() -> None:
        try:
            outcome["result"] = run_finetune(**step_args)
        except Exception as err:
            outcome["error"] = err

    thread = threading.Thread(target=first_attempt)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not complete_checkpoints(checkpoints) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert complete_checkpoints(checkpoints), "no checkpoint completed in time"
    # A step past the newest checkpoint logged, to compare the resumed run with.
    while time.monotonic() < deadline and max(first_losses(), default=0) <= max(
        complete_checkpoints(checkpoints)
    ):
        time.sleep(0.05)
    victim = worker(local_rank=1)
    assert victim is not None
    os.kill(victim.pid, signal.SIGKILL)
    thread.join(timeout=300)
    return outcome.get("error"), first_losses()
