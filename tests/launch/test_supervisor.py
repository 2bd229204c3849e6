"""run_launcher passes a SIGTERM this process gets on to the launcher, once, and waits for it:
on a preempted VM the step's process is the one the signal reaches, and the ranks need the
launcher alive while they save."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from llm_pipeline.launch.supervisor import run_launcher

# A stand-in for torchrun's signal handling: counts SIGTERMs, takes a moment (a save), and
# exits with the preemption code.
_LAUNCHER = """
import signal, sys, time
received = []
signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
print("ready", flush=True)
while not received:
    time.sleep(0.01)
time.sleep(0.5)
print(f"terms {len(received)}", flush=True)
sys.exit(75)
"""


def test_sigterm_reaches_the_launcher_once_and_the_wait_goes_on(tmp_path: Path) -> None:
    def terminate_this_process_twice() -> None:
        time.sleep(1.5)  # the child is up and has its handler by then
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    threading.Thread(target=terminate_this_process_twice, daemon=True).start()

    ended = run_launcher([sys.executable, "-c", _LAUNCHER], env=dict(os.environ), log_dir=tmp_path)

    assert ended.code == 75
    assert ended.forwarded_signal == signal.SIGTERM
    assert "terms 1" in ended.output_tail
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_launch_without_a_signal_reports_none(tmp_path: Path) -> None:
    ended = run_launcher(
        [sys.executable, "-c", "print('done')"],
        env=dict(os.environ),
        log_dir=tmp_path,
    )
    assert ended.code == 0 and ended.forwarded_signal is None
    assert ended.output_tail == "done\n"


def test_ctrl_c_reaches_the_launcher_once_as_sigterm_outside_the_terminals_group(
    tmp_path: Path,
) -> None:
    """A local run's Ctrl-C: the terminal signals its foreground group, which the launcher is
    not in (its ranks would each raise KeyboardInterrupt instead of saving); the step passes
    one SIGTERM on, whatever it gets, and waits."""
    launcher = _LAUNCHER.replace(
        'print("ready", flush=True)',
        'import os; print(f"group {os.getpgid(0)}", flush=True)',
    )

    def interrupt_this_process_twice() -> None:
        time.sleep(1.5)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGINT)
    threading.Thread(target=interrupt_this_process_twice, daemon=True).start()

    ended = run_launcher([sys.executable, "-c", launcher], env=dict(os.environ), log_dir=tmp_path)

    assert ended.code == 75
    assert ended.forwarded_signal == signal.SIGINT
    assert "terms 1" in ended.output_tail
    group = int(ended.output_tail.split("group ")[1].split()[0])
    assert group != os.getpgid(0)
    assert signal.getsignal(signal.SIGINT) == before
