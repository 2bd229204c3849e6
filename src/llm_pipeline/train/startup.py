"""A bound on a training process's start-up, and a message that names what it waited on.

Start-up (joining the group, loading DeepSpeed's ops, reading data, building the model and
engine) can wait forever on things no timeout covers: a build lock, a file on a hung mount, a
download. If the first training step has not begun within `train.startup_timeout_s`, the
watchdog records an error that names the line of `worker.run` the process was on and the call
it was blocked in (read from the main thread's stack; for a build lock, its path), then ends
the process, so the step fails with that message instead of hanging.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from types import FrameType
from typing import Any

from transformers import TrainerCallback

from llm_pipeline.errors import TrainError

#: The exit code of a process the watchdog ends.
STARTUP_TIMEOUT_EXIT_CODE = 3


class StartupWatchdog(TrainerCallback):
    """Ends the process if training has not begun `timeout_s` after `start()`."""

    def __init__(self, timeout_s: float, *, entry: str) -> None:
        self.timeout_s = timeout_s
        self.entry = entry  # the function whose current line names the stage
        self._begun = threading.Event()
        self._main = threading.main_thread()

    def start(self) -> StartupWatchdog:
        threading.Thread(target=self._watch, name="startup-watchdog", daemon=True).start()
        return self

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._begun.set()

    def _watch(self) -> None:
        if self._begun.wait(self.timeout_s):
            return
        message = self.message()
        print(f"ERROR: {message}", file=sys.stderr, flush=True)
        _record(TrainError(message))
        os._exit(STARTUP_TIMEOUT_EXIT_CODE)

    def message(self) -> str:
        """What the main thread is doing now, in words a user can act on."""
        frames = _frames(sys._current_frames().get(self._main.ident or -1))
        stage = next((f for f in frames if f.f_code.co_name == self.entry), None)
        innermost = frames[-1] if frames else None
        rank = os.environ.get("RANK", "0")
        text = f"rank {rank} did not start training within train.startup_timeout_s "
        text += f"({self.timeout_s:g} s)"
        if stage is not None:
            text += f"; it was at: {_source_line(stage)}"
        if innermost is not None and innermost is not stage:
            text += f"; waiting in {_where(innermost)}"
            lock = innermost.f_locals.get("lock_file_path")
            if isinstance(lock, str):
                text += (
                    f" on the build lock {lock} (if no other process is building that op, a "
                    "killed one left it: delete the file)"
                )
        return text + ". Raise train.startup_timeout_s if start-up is legitimately this slow."


def _frames(frame: FrameType | None) -> list[FrameType]:
    """The stack from outermost to innermost."""
    stack = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    return stack[::-1]


def _source_line(frame: FrameType) -> str:
    summary = traceback.extract_stack(frame, limit=1)[-1]
    return (summary.line or f"line {summary.lineno}").strip()


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename.split("site-packages/")[-1]
    return f"{code.co_qualname}() ({path}:{frame.f_lineno})"


def _record(error: Exception) -> None:
    """Write the error where torchrun looks for a rank's exception (its error file)."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    try:
        raise error
    except TrainError as raised:
        ErrorHandler().record_exception(raised)
