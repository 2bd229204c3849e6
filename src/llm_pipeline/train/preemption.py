"""Save and stop at the next step boundary when the machine is being taken away.

Vertex AI gives a Spot VM, or one evicted for maintenance, a SIGTERM and about 30 seconds
before it stops it. torchrun passes the signal to every rank and kills them 30 s later
(its `--shutdown_timeout`), so a rank has that long to save. What happens on SIGTERM:
- before the first training step (start-up: loading, joining, building the engine) there is
  nothing worth saving: the process exits at once with `PREEMPTED_EXIT_CODE` (a build lock
  that leaves behind is cleared by the next loader, see `op_builds`);
- during training it sets a flag. At each step's end the ranks agree on it (one all-reduce
  of a single integer in host memory, over a gloo group: read from a GPU, it would make the
  host wait for the step's work every step; a signal seen by any rank stops all of them on
  the same step), save a
  checkpoint through the Trainer's usual path, which `CompleteCheckpoints` marks complete
  once every rank's files are in, and leave the loop (`Preempted`); the worker then exits
  with `PREEMPTED_EXIT_CODE` and a restarted job resumes from that checkpoint.
If the kill comes before the save is complete, its folder has no marker and the previous
complete checkpoint stays the newest one (see `checkpoints`).

The signal is seen by a thread of its own, through Python's wakeup file descriptor, not by
a handler in the main thread: that thread may be blocked in a collective (a peer died, and
torchrun's SIGTERM is tearing the job down), where a Python handler would never run and the
rank would sit out torchrun's grace period to be SIGKILLed, hiding the rank that really
failed. If no step ends within twice the last step's time (5 to 20 s) after the signal, the
rank exits without a checkpoint. A second SIGTERM ends it at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from llm_pipeline.errors import PREEMPTED_EXIT_CODE
from llm_pipeline.train.checkpoint_sync import release_folder

SIGNALS = (signal.SIGTERM,)


class Preempted(BaseException):
    """Raised by `loop.train` once the stop's checkpoint is saved.

    A BaseException, like KeyboardInterrupt, so that code catching `Exception` on the way out
    does not swallow it.
    """

    def __init__(self, signum: int, step: int | None = None) -> None:
        self.signum = signum
        self.step = step
        super().__init__(signal.Signals(signum).name)


class SaveOnSignal(TrainerCallback):
    """Turn SIGTERM into "save now, then stop" at the next step boundary, on every rank."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the signal received, once one was
        self.saved_step: int | None = None  # the step saved because of it
        self._training = False
        self._step_started = 0.0
        self._step_seconds: float | None = None
        self._give_up: threading.Timer | None = None
        self._host_group: Any = None  # the process group the flag is agreed over

    def install(self) -> None:
        """Watch for SIGTERM from now on (main thread only, as Python requires)."""
        if threading.current_thread() is not threading.main_thread():
            return  # tests run workers in threads; their signals are the process's own
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        for signum in SIGNALS:
            # The byte on the wakeup fd is the notice; this handler only keeps the default
            # action (death) from happening.
            signal.signal(signum, lambda signum, frame: None)
        threading.Thread(
            target=self._watch, args=(read_end,), name="sigterm-watch", daemon=True
        ).start()

    def _watch(self, read_end: int) -> None:
        while True:
            for signum in os.read(read_end, 64):
                if signum in SIGNALS:
                    self._on_signal(signum)

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            _exit(f"a second {name}: stopping now, without a checkpoint")
        self.signum = signum
        if not self._training:
            _exit(f"{name} during start-up: stopping; nothing has been trained yet")
        grace = min(max(2 * (self._step_seconds or 5.0), 5.0), 20.0)
        self._give_up = threading.Timer(
            grace, _exit, args=(f"no training step ended within {grace:g} s of {name}",)
        )
        self._give_up.daemon = True
        self._give_up.start()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._training = True
        self._host_group = host_group(args.ddp_timeout)

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._step_started = time.monotonic()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._step_seconds = time.monotonic() - self._step_started
        if self._give_up is not None:
            self._give_up.cancel()  # at a boundary: the save may take what it needs
        if state.max_steps and state.global_step >= state.max_steps:
            return  # the last step: the run finishes and saves its model anyway
        if not self._any_rank_signalled():
            return
        control.should_save = True
        control.should_evaluate = False
        control.should_training_stop = True
        self.saved_step = state.global_step
        if self.signum is None:
            self.signum = int(signal.SIGTERM)  # another rank got it; stop all the same

    def _any_rank_signalled(self) -> bool:
        flag = torch.tensor([0 if self.signum is None else 1], dtype=torch.int32)
        if dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._host_group)
        # numpy() reads host memory and refuses a device tensor: no wait on the GPU here.
        return bool(flag.numpy()[0])


def host_group(timeout_s: float) -> Any:
    """A process group that all-reduces tensors in host memory: the default one where it is
    gloo (CPU runs), else a gloo group of every rank (all ranks must call this together)."""
    if not dist.is_initialized() or dist.get_backend() == "gloo":
        return None
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))


def _exit(reason: str) -> None:
    """End the process now, from any thread, with the preemption code; a lease on an object
    storage checkpoint folder is given up first, so a restart need not wait for it to expire."""
    rank = os.environ.get("RANK", "0")
    print(f"rank {rank}: {reason}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    try:
        release_folder()
    except Exception as err:  # the process ends either way; the lease then expires
        print(f"rank {rank}: could not give up its lease: {err}", file=sys.stderr)
    os._exit(PREEMPTED_EXIT_CODE)
