"""Ctrl-C or SIGTERM to a local run stops the whole run, within seconds, and nothing else.

KFP's local runner starts each step as `sh -ec ...` with `python -m kfp.dsl.executor_main`
under it; the finetune and evaluate steps start a launcher (torchrun) in a process group of
its own, and it starts the ranks. A Ctrl-C reaches the CLI and the step (the terminal's
foreground group); a `kill <pid>` or an IDE's stop button reaches the CLI alone. Either way
`StopOnSignal` sends each step's Python one SIGTERM (the shell in front would die of it and
leave the step running): a step that runs a launcher passes it on and waits while the ranks
save a checkpoint at their next step boundary and exit (launch/supervisor.py), any other
step ends at once. A step KFP starts after the signal gets the same. What is still there
after `GRACE_S`, or after a second signal, is killed, launcher and ranks included. The run
then ends as a failed one does, so its log and report are written; the CLI says it stopped.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any

import psutil

#: Seconds the steps get to stop (the ranks to save) before everything left is killed.
GRACE_S = 30.0
#: What names a step's own process on its command line (KFP's lightweight component runner).
STEP_MODULE = "kfp.dsl.executor_main"
#: How a signal is named to the user.
SIGNAL_NAMES: dict[int, str] = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}
_POLL_S = 0.2


@dataclass
class StopOnSignal:
    """While entered (on the main thread), SIGINT and SIGTERM stop this process's run instead
    of ending this process; `signum` says which one came, None if none did.

    `say` gets the line that tells the user what is happening (called from a thread of its
    own, never from inside the signal handler, which may interrupt a write to the terminal).
    """

    say: Callable[[str], None]
    grace_s: float = GRACE_S
    signum: int | None = None
    _asked: set[int] = field(default_factory=set)
    _done: threading.Event = field(default_factory=threading.Event)
    _previous: dict[int, Any] = field(default_factory=dict)
    _watcher: threading.Thread | None = None

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNAL_NAMES:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._watcher is not None:
            self._watcher.join()
        if self.signum is not None:
            _kill(_steps_and_theirs())  # a shell or helper still there once KFP has returned
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:  # a second signal: no more waiting
            _kill(_steps_and_theirs())
            return
        self.signum = signum
        self._ask_steps_to_stop()
        self._watcher = threading.Thread(target=self._watch, name="run-stopper", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        assert self.signum is not None
        self.say(
            f"Stopping the run ({SIGNAL_NAMES[self.signum]}): training saves a checkpoint at "
            f"its next step; everything still running in {self.grace_s:.0f} s is killed "
            "(a second Ctrl-C kills it now)."
        )
        deadline = time.monotonic() + self.grace_s
        while not self._done.wait(_POLL_S):
            if time.monotonic() < deadline:
                self._ask_steps_to_stop()  # one KFP started after the signal
            elif left := _steps_and_theirs():
                self.say(f"Killing {len(left)} processes still running after {self.grace_s:.0f} s.")
                _kill(left)
                deadline = float("inf")

    def _ask_steps_to_stop(self) -> None:
        for process in _descendants():
            if process.pid in self._asked or not _is_step(process):
                continue
            self._asked.add(process.pid)
            with contextlib.suppress(psutil.Error):
                process.terminate()


def _descendants() -> list[psutil.Process]:
    try:
        return list(psutil.Process().children(recursive=True))
    except psutil.Error:
        return []


def _steps_and_theirs() -> list[psutil.Process]:
    """The run's step processes, KFP's shells around them, and everything they started
    (launchers, ranks): what a kill may take. Not every child of this process: a caller
    (a test session, an IDE) may have started others that are not the run's."""
    found: dict[int, psutil.Process] = {}
    for step in filter(_runs_a_step, _descendants()):
        found[step.pid] = step
        with contextlib.suppress(psutil.Error):
            found.update((child.pid, child) for child in step.children(recursive=True))
    return list(found.values())


def _runs_a_step(process: psutil.Process) -> bool:
    """A step's process, or KFP's `sh -ec` whose script starts one."""
    try:
        return any(STEP_MODULE in part for part in process.cmdline())
    except psutil.Error:
        return False


def _is_step(process: psutil.Process) -> bool:
    try:
        return STEP_MODULE in process.cmdline()
    except psutil.Error:
        return False


def _kill(processes: list[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
