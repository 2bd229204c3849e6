"""Ctrl-C or SIGTERM during a local run: each step's own process is asked to stop once (the
shell KFP puts in front is left to end with it), a step KFP starts later too, and what is
still there after the grace period, or after a second signal, is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from llm_pipeline.local.stopping import STEP_MODULE, StopOnSignal

# A stand-in for a step's Python under KFP's `sh -ec`: its command line names the executor
# module as KFP's does; on SIGTERM it says so and exits (or, ignoring, goes on).
_STEP = """
import signal, sys, time
mode = sys.argv[1]
def on_term(signum, frame):
    print("step got SIGTERM", flush=True)
    if mode == "stops":
        sys.exit(3)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(60)
"""


def _start_step(mode: str, *, ready: bool = True) -> subprocess.Popen[str]:
    """`sh -c 'python -c STEP MODE kfp.dsl.executor_main'`, as KFP's shell runs the step;
    with `ready`, once the step has its SIGTERM handler."""
    command = f"{sys.executable} -c '{_STEP}' {mode} {STEP_MODULE}; echo shell-after-step"
    process = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    if ready:
        assert process.stdout.readline() == "ready\n"
    return process


@pytest.fixture
def said() -> list[str]:
    """The lines the stopper says."""
    return []


def test_sigterm_asks_the_step_once_and_the_shell_lives_on(said: list[str]) -> None:
    before = signal.getsignal(signal.SIGTERM)
    step = _start_step("stops")
    with StopOnSignal(say=said.append) as stopper:
        os.kill(os.getpid(), signal.SIGTERM)
        out, _ = step.communicate(timeout=30)
    assert stopper.signum == signal.SIGTERM
    # The step, not its shell, got the signal: the shell went on after it, as KFP's does.
    assert out.splitlines() == ["step got SIGTERM", "shell-after-step"]
    assert said and said[0].startswith("Stopping the run (SIGTERM)")
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_step_started_after_the_signal_is_asked_too(said: list[str]) -> None:
    with StopOnSignal(say=said.append) as stopper:
        os.kill(os.getpid(), signal.SIGINT)
        step = _start_step("stops", ready=False)  # KFP moving on to the next step meanwhile
        out, _ = step.communicate(timeout=30)
    assert stopper.signum == signal.SIGINT
    # Ended by the SIGTERM (before or after it took its handler), and not in its 60 s sleep.
    assert out.splitlines()[-1] == "shell-after-step"


def test_what_outlives_the_grace_period_is_killed(said: list[str]) -> None:
    step = _start_step("ignores")
    started = time.monotonic()
    with StopOnSignal(say=said.append, grace_s=1.0):
        os.kill(os.getpid(), signal.SIGTERM)
        step.wait(timeout=30)
    assert 1.0 <= time.monotonic() - started < 20
    assert any(line.startswith("Killing ") for line in said)


def test_a_second_signal_kills_at_once(said: list[str]) -> None:
    step = _start_step("ignores")
    started = time.monotonic()
    with StopOnSignal(say=said.append, grace_s=60.0):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)
        step.wait(timeout=30)
    assert time.monotonic() - started < 20


def test_no_signal_touches_nothing(said: list[str]) -> None:
    step = _start_step("stops")
    with StopOnSignal(say=said.append) as stopper:
        pass
    assert stopper.signum is None and said == []
    assert psutil.Process(step.pid).is_running()
    step.kill()
    step.wait()


def test_a_kill_takes_the_runs_processes_only(said: list[str]) -> None:
    """What the caller started besides the run (a test session's servers, an IDE's tools)
    outlives the run's kill."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    step = _start_step("ignores")
    try:
        with StopOnSignal(say=said.append, grace_s=0.5):
            os.kill(os.getpid(), signal.SIGTERM)
            step.wait(timeout=30)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
