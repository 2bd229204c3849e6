"""Processes that die with the process that started them, however it dies.

A launcher killed with SIGKILL runs no cleanup, so its children must learn of its death from
the kernel: Linux's parent-death signal (`prctl(PR_SET_PDEATHSIG)`) is sent to a process when
its parent ends. Two ways to arm it:
- `dies_with_this_process()`: a `preexec_fn` for the launchers this package starts (torchrun,
  DeepSpeed's runner, sshd); it runs in the child between fork and exec, and survives exec;
- `die_with_parent()`: first thing in a process started by a launcher this package does not
  control (the ranks torchrun and DeepSpeed's `launch` start).

The signal is SIGTERM: torchrun passes it to its ranks and DeepSpeed's runner stops every
node's ranks over pdsh, and a rank that gets it saves at the next step boundary if it can
(`preemption`) and exits within seconds either way. What it does not cover:
- the kernel sends it when the *thread* that forked the child ends, not the process; every
  launcher here is started and waited for by one thread;
- a parent that died before the child armed it: the child checks right after arming whether
  it was already handed to another parent. With `dies_with_this_process` the check is exact
  (the parent's pid is known). A rank knows no pid to check against, so it arms before its
  heavy imports (a window of milliseconds) and then recognises adoption by pid 1 (init, or a
  container's first process) unless pid 1 is itself a launcher; adoption by a subreaper is not
  recognised, and such a rank cannot join its process group (the launcher held the store), so
  the start-up watchdog ends it;
- processes started over ssh by DeepSpeed's pdsh runner are not children of anything here:
  they end through the runner's own cleanup, which the runner does run on SIGTERM.
Not Linux: nothing is armed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1
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
    """Have this process get `signum` when its parent ends; exit now if the parent is gone."""
    if not _LINUX:
        return
    _arm(signum)
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
