"""Run a launcher (torchrun, DeepSpeed's runner) to the end, as the finetune and evaluate
steps both do: its output echoed live, its last lines and every rank's logs kept for the
failure message (`failures.first_failure`). A SIGTERM this process gets (a preempted VM, a
`kill`) is passed on to the launcher, which passes it to the ranks, and the wait goes on: the
ranks save a checkpoint and exit, and only then does this process return. A SIGINT (Ctrl-C in
the terminal of a local run) is passed on the same way, as a SIGTERM: the launcher runs in a
process group of its own, so the terminal's SIGINT reaches this process only, and the ranks
get one signal that they know how to stop on, instead of a KeyboardInterrupt each. If this
process dies without a word (SIGKILL, OOM), the kernel sends the launcher SIGTERM
(`lifetime`)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from llm_pipeline.launch.lifetime import STEP_PID_ENV, dies_with_this_process
from llm_pipeline.launch.shm_segments import remove_stale_segments

#: The signals passed on to the launcher (as SIGTERM): a preemption's, and a local run's Ctrl-C.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Lines of a launcher's output kept to find why it failed.
OUTPUT_TAIL_LINES = 400


@dataclass(frozen=True)
class LauncherExit:
    """How the launcher ended: its exit code and its last lines of output."""

    code: int
    output_tail: str
    #: The signal this process received and passed on to the launcher, if any.
    forwarded_signal: int | None = None


def run_launcher(command: Sequence[str], *, env: Mapping[str, str], log_dir: Path) -> LauncherExit:
    """Run `command` with `env` and wait; echo its output, keep its last `OUTPUT_TAIL_LINES`.

    torchrun reads PET_LOG_DIR and PET_TEE as its --log-dir and --tee: every rank's stderr
    and recorded exception land in files under `log_dir` and still reach the console. If
    this process is interrupted, the launcher is stopped (it stops its ranks) before the
    interruption goes on.
    """
    child_env = dict(env)
    child_env.setdefault("PET_LOG_DIR", str(log_dir))
    child_env.setdefault("PET_TEE", "3")
    child_env[STEP_PID_ENV] = str(os.getpid())  # the launcher's ranks watch this process
    tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
    process = subprocess.Popen(
        list(command),
        env=child_env,
        # The launcher gets SIGTERM when this thread ends, however it ends (SIGKILL included),
        # and passes it to its ranks: nothing started here outlives this process.
        preexec_fn=dies_with_this_process(),
        # Out of the terminal's foreground group: Ctrl-C reaches the launcher through
        # `_forward_signals` only, once, as the SIGTERM it stops its ranks on.
        process_group=0,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    forwarded: list[int] = []
    previous = _forward_signals(process, forwarded)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            tail.append(line)
        code = process.wait()
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait()
        # DeepSpeed's CPU all-reduce segments outlive its ranks, killed or not.
        remove_stale_segments()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return LauncherExit(code, "".join(tail), forwarded[0] if forwarded else None)


def _forward_signals(process: subprocess.Popen[str], forwarded: list[int]) -> dict[int, Any]:
    """Pass SIGTERM or SIGINT on to `process`, once, as SIGTERM, noting the signal received in
    `forwarded`; returns the handlers it replaced (none off the main thread, where Python
    allows no signal handlers).

    Once only: torchrun treats a second SIGTERM during its shutdown as a new failure and
    stops waiting for the ranks' save.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}

    def forward(signum: int, frame: FrameType | None) -> None:
        if not forwarded and process.poll() is None:
            forwarded.append(signum)
            process.send_signal(signal.SIGTERM)

    return {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
