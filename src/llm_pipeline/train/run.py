"""Run a launcher (torchrun, DeepSpeed's runner) to the end, as the finetune and evaluate
steps both do: its output echoed live, its last lines and every rank's logs kept for the
failure message (`failures.first_failure`)."""

from __future__ import annotations

import collections
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Lines of a launcher's output kept to find why it failed.
OUTPUT_TAIL_LINES = 400


@dataclass(frozen=True)
class LauncherExit:
    """How the launcher ended: its exit code and its last lines of output."""

    code: int
    output_tail: str


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
    tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
    process = subprocess.Popen(
        list(command),
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
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
    return LauncherExit(code, "".join(tail))
