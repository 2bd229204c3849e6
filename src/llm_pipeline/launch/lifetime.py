"""Processes that die with the process that started them, however it dies.

A launcher killed with SIGKILL runs no cleanup, so its children must learn of its death from
the kernel: Linux's parent-death signal (`prctl(PR_SET_PDEATHSIG)`) is sent to a process when
its parent ends. Two ways to arm it:
- `dies_with_this_process()`: a `preexec_fn` for the launchers this package starts (torchrun,
  DeepSpeed's runner, sshd); it runs in the child between fork and exec, and survives exec;
- `die_with_parent()`: first thing in a process started by a launcher this package does not
  control (the ranks torchrun and DeepSpeed's `launch` start).
A local run's steps are started by KFP's local runner behind a `sh` that nobody arms: each
step's process watches the run's (`RUN_PID_ENV`, set by `watched_by_steps`) once a second
and stops as on a SIGTERM when it is gone (`die_with_run`), so a run SIGKILLed leaves no
step training on.

The signal is SIGTERM: torchrun passes it to its ranks and DeepSpeed's runner stops every
node's ranks over pdsh, and a rank that gets it saves at the next step boundary if it can
(`preemption`) and exits within seconds either way. A rank also watches the process that ran
the launcher (`STEP_PID_ENV`, set by `run.run_launcher`) once a second and stops as on a
SIGTERM when it is gone: that covers a layer between launcher and ranks that nobody arms
(DeepSpeed's one-node runner starts `deepspeed.launcher.launch`, which starts the ranks, and
dies of SIGTERM without stopping it). Limits:
- the kernel sends the signal when the *thread* that forked the child ends, not the process;
  every launcher here is started and waited for by one thread;
- a parent that died before the child armed: `dies_with_this_process` checks the parent's pid
  exactly. A rank knows no pid to check its parent against, so it arms before its heavy
  imports (a window of milliseconds) and then takes adoption by pid 1 (init, or a container's
  first process) for a dead parent, unless pid 1 is a launcher itself; adoption by another
  subreaper is not seen, and only the step watch (or, failing that, the start-up watchdog)
  ends such a rank;
- processes started over ssh by DeepSpeed's pdsh runner are nobody's children here and have
  no step to watch: they end through the runner's own cleanup, which it runs on SIGTERM (it
  pkills every node's launcher over pdsh); a runner killed with SIGKILL leaves them running.
Not Linux: nothing is armed.

A rank whose work is saved ends with `exit_without_teardown`: its exit handlers run, the
interpreter's teardown does not.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

_PR_SET_PDEATHSIG = 1
#: The pid of the process that ran the launcher, for the processes the launcher starts.
STEP_PID_ENV = "LLM_PIPELINE_STEP_PID"
#: The pid of the local run (`pipeline.py`), for the steps KFP's local runner starts.
RUN_PID_ENV = "LLM_PIPELINE_RUN_PID"
_WATCH_S = 1.0
_LINUX = sys.platform.startswith("linux")
# Loaded before any fork: a preexec_fn must not import or allocate much.
_libc = ctypes.CDLL(None, use_errno=True) if _LINUX else None


def _arm(signum: int) -> None:
    assert _libc is not None
    if _libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")


def dies_with_this_process(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` that sends the child `signum` when the calling thread ends (None off
    Linux); a child whose parent is already gone by then exits at once."""
    if not _LINUX:
        return None
    parent = os.getpid()

    def arm() -> None:
        _arm(signum)
        if os.getppid() != parent:
            os._exit(128 + signum)

    return arm


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Have this process get `signum` when its parent ends, or when the process that ran the
    launcher (`STEP_PID_ENV`) ends; exit now if the parent is gone."""
    if not _LINUX:
        return
    _arm(signum)
    _watch(STEP_PID_ENV, signum)
    if os.getppid() == 1 and not _launcher_is_init():
        print(
            f"pid {os.getpid()}: the launcher that started this process is gone; stopping",
            file=sys.stderr,
            flush=True,
        )
        os._exit(128 + signum)


def _launcher_is_init() -> bool:
    """Whether pid 1 is a launcher (torchrun or DeepSpeed's run as a container's entrypoint),
    in which case being its child is no sign of a dead parent."""
    try:
        raw = Path("/proc/1/cmdline").read_bytes()
    except OSError:
        return True  # cannot tell: do not stop a process that may be fine
    command = raw.replace(b"\0", b" ").decode("utf-8", "replace")
    return any(name in command for name in ("torch.distributed.run", "torchrun", "deepspeed"))


@contextlib.contextmanager
def watched_by_steps() -> Iterator[None]:
    """While inside, the processes this one starts (a local run's steps) learn its pid
    (`RUN_PID_ENV`), which `die_with_run` watches."""
    previous = os.environ.get(RUN_PID_ENV)
    os.environ[RUN_PID_ENV] = str(os.getpid())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(RUN_PID_ENV, None)
        else:
            os.environ[RUN_PID_ENV] = previous


def die_with_run(signum: int = signal.SIGTERM) -> None:
    """Have this step's process get `signum` once the local run that started it
    (`RUN_PID_ENV`) is gone; nothing where no run set it (a step on Vertex)."""
    if _LINUX:
        _watch(RUN_PID_ENV, signum)


def _watch(variable: str, signum: int) -> None:
    """Send this process `signum` once the process named by `variable` is gone."""
    pid = os.environ.get(variable, "")
    if not pid.isdigit():
        return
    started = _start_time(int(pid))

    def watch() -> None:
        while started is not None and _start_time(int(pid)) == started:
            time.sleep(_WATCH_S)
        os.kill(os.getpid(), signum)

    threading.Thread(target=watch, name=f"watch-{pid}", daemon=True).start()


def _start_time(pid: int) -> str | None:
    """When `pid` started (a pid reused by another process reads differently); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if fields and fields[0] != "Z" else None


def exit_without_teardown(code: int = 0) -> NoReturn:
    """End a rank whose work is saved: Python's exit handlers run (logging flushes), then
    the process ends without the interpreter's teardown. That teardown destroys C++
    objects whose threads may still run (a finished DPO rank under ZeRO-3 aborted there with
    'terminate called without an active exception' after the process group was gone, and
    the step failed), and it takes about 2 s per rank for nothing once the work is on disk.
    Leave the process group first (`torch.distributed.destroy_process_group`)."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
