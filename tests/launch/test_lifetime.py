"""Processes that die with the process that started them: real processes, SIGKILLed.

The chain is the one of DeepSpeed's one-node launcher: the step starts a runner, the runner
starts a launch process of its own, which starts the rank. The runner is armed by the step
(`dies_with_this_process`); the launch process is nobody's to arm and outlives the runner.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import psutil

_RANK = """
import time
from llm_pipeline.launch.lifetime import die_with_parent
die_with_parent()
print("armed", flush=True)
time.sleep(600)
"""
_LAUNCH = f"""
import subprocess, sys, time
rank = subprocess.Popen([sys.executable, "-c", {_RANK!r}])
time.sleep(600)
"""
_RUNNER = f"""
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", {_LAUNCH!r}])
time.sleep(600)
"""
_STEP = f"""
import sys, time
from pathlib import Path
from llm_pipeline.launch.supervisor import run_launcher
run_launcher([sys.executable, "-c", {_RUNNER!r}], env=dict(__import__("os").environ),
             log_dir=Path("."))
"""


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(condition())


def test_the_launcher_and_a_rank_behind_another_layer_die_with_a_killed_step() -> None:
    step = subprocess.Popen([sys.executable, "-c", _STEP], stdout=subprocess.PIPE, text=True)
    started: list[psutil.Process] = []
    try:
        assert step.stdout is not None and "armed" in step.stdout.readline()
        started = psutil.Process(step.pid).children(recursive=True)
        runner, launch, rank = sorted(started, key=lambda p: p.create_time())
        step.kill()
        step.wait()

        assert _wait(lambda: not _running(runner), timeout=5), "the runner outlived the step"
        assert _wait(lambda: not _running(rank), timeout=5), "the rank outlived the step"
        assert _running(launch), "the launch layer lives on: only the rank's watch stopped it"
    finally:
        step.kill()
        for process in started:
            if _running(process):
                process.kill()


_LOCAL_STEP = """
import time
from llm_pipeline.output_files import Step
from llm_pipeline.steps.reporting import reports_user_errors

@reports_user_errors(Step.FINETUNE)
def body(arguments):
    print("started", flush=True)
    time.sleep(600)

body({})
"""
#: KFP's local runner starts each step as `sh -ec '... python3 -m kfp.dsl.executor_main'`.
_LOCAL_RUN = f"""
import os, subprocess, sys, time
from llm_pipeline.launch.lifetime import watched_by_steps
with watched_by_steps():
    subprocess.Popen(["sh", "-ec", f"{{sys.executable}} -c \\"$STEP\\""],
                     env={{**os.environ, "STEP": {_LOCAL_STEP!r}}})
time.sleep(600)
"""


def test_a_local_runs_step_behind_its_shell_stops_when_the_run_is_killed() -> None:
    """A local run SIGKILLed (the OOM killer, kill -9) left its running step going on,
    finetune training for hours with nobody to see it end: the `sh` in front of the step
    is nobody's to arm, and the step's Python is its child."""
    run = subprocess.Popen([sys.executable, "-c", _LOCAL_RUN], stdout=subprocess.PIPE, text=True)
    started: list[psutil.Process] = []
    try:
        assert run.stdout is not None and "started" in run.stdout.readline()
        started = psutil.Process(run.pid).children(recursive=True)
        shell, step = sorted(started, key=lambda p: p.create_time())
        run.kill()
        run.wait()

        assert _wait(lambda: not _running(step), timeout=10), "the step outlived the run"
        assert _wait(lambda: not _running(shell), timeout=5), "the step's shell outlived it"
    finally:
        run.kill()
        for process in started:
            if _running(process):
                process.kill()
