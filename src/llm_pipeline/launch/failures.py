"""Turn a failed launch into one message that shows the rank that failed first, and why.

torchrun writes each rank's uncaught exception to `<log dir>/.../<local rank>/error.json`
(the worker's `@record`) and, with `--tee`, its stderr to `stderr.log` beside it. A rank that
died without an exception (SIGKILL, a segfault, the OOM killer) has only the stderr tail and
the exit code torchrun reports under "Root Cause".

A rank that ran out of device memory is recognised here too (`is_out_of_memory`), and worded
the same way for training and evaluation (`out_of_memory_message`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

# Settings that lower memory per device, most effective first; named in out-of-memory errors.
OOM_ADVICE = (
    "lower train.per_device_batch_size (and raise train.gradient_accumulation_steps to keep "
    "the global batch), lower data.max_source_length / max_target_length, set "
    "train.gradient_checkpointing to true, or offload with train.offload_optimizer / "
    'train.offload_param ("cpu")'
)

_OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "out of memory")


def is_out_of_memory(text: str) -> bool:
    """Whether an error message (or a rank's stderr tail) reports device memory exhaustion."""
    return any(marker in text for marker in _OOM_MARKERS)


def out_of_memory_message(detail: str) -> str:
    """The message for a rank that ran out of device memory: what happened and what to lower."""
    return f"training ran out of GPU memory: {detail.strip()}\nTo fit: {OOM_ADVICE}."


_TAIL_LINES = 25
# One entry of torchrun's failure summary: "rank : 1 (local_rank: 1)\n exitcode : -9 (pid: ..".
_EXIT = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*exitcode\s*:\s*(-?\d+)")
# Signals torchrun itself sends to the surviving ranks once one has failed.
_STOP_SIGNALS = frozenset({2, 15})
# How torchrun's `record` opens the message of a TrainError (`f"{type(e).__name__}: {e}"`).
_TRAIN_ERROR = "TrainError: "
_TIMEOUT_MARKERS = ("Timed out", "timed out", "Timeout", "DistStoreError", "watchdog")


@dataclass(frozen=True)
class RankError:
    """One rank's recorded exception."""

    local_rank: int
    message: str
    timestamp: float


def recorded_errors(log_dir: Path) -> list[RankError]:
    """Exceptions the ranks recorded, earliest first (the first is usually the cause)."""
    errors = []
    for path in log_dir.rglob("error.json"):
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        body = payload.get("message", {})
        if isinstance(body, str):
            message, stamp = body, 0.0
        else:
            message = str(body.get("message", ""))
            extra = body.get("extraInfo", {})
            stamp = float(extra.get("timestamp", 0) or 0)
            callstack = str(extra.get("py_callstack", ""))
            if callstack and not message.startswith(_TRAIN_ERROR):
                message = f"{message}\n{_tail(callstack, 12)}"
        errors.append(RankError(_local_rank_of(path), message.strip(), stamp))
    return sorted(errors, key=lambda e: e.timestamp)


def stderr_tail(log_dir: Path, local_rank: int) -> str:
    """The last lines rank `local_rank` wrote to stderr, if torchrun kept them."""
    tails = [
        _tail(path.read_text(encoding="utf-8", errors="replace"), _TAIL_LINES)
        for path in sorted(log_dir.rglob("stderr.log"))
        if _local_rank_of(path) == local_rank
    ]
    return tails[-1] if tails else ""


@dataclass(frozen=True)
class RankFailure:
    """The rank a failed launch is blamed on: its local rank, how it ended (`raised`, `exited
    with exit code 1; its last output`, ...) and what it said."""

    local_rank: int
    how: str
    detail: str


def rank_exit_codes(launcher_output: str) -> list[int]:
    """The exit code of each rank torchrun's failure summary lists (negative: a signal)."""
    return [int(code) for _, _, code in _EXIT.findall(launcher_output)]


def first_failure(*, log_dir: Path, launcher_output: str) -> RankFailure | None:
    """The rank to blame for a failed launch; None when no rank reported anything.

    Blame, in order: a rank killed by a signal (its peers' errors are only symptoms, such as
    "connection closed"); else the earliest exception a rank recorded; else the rank torchrun
    names as the root cause, with its stderr tail. Training and evaluation word it their way.
    """
    exits = [(int(local), int(code)) for _, local, code in _EXIT.findall(launcher_output)]
    killed = [(local, code) for local, code in exits if code < 0 and -code not in _STOP_SIGNALS]
    recorded = recorded_errors(log_dir)
    if killed:
        local_rank, code = killed[0]
        detail = stderr_tail(log_dir, local_rank) or "(it wrote nothing to stderr)"
        return RankFailure(
            local_rank, f"was killed by {_describe_exit(code)}; its last output", detail
        )
    if recorded:
        return RankFailure(recorded[0].local_rank, "raised", recorded[0].message)
    if exits:
        local_rank, code = exits[-1]  # torchrun lists the root cause last
        detail = stderr_tail(log_dir, local_rank) or "(it wrote nothing to stderr)"
        return RankFailure(
            local_rank, f"exited with {_describe_exit(code)}; its last output", detail
        )
    return None


def failure_message(
    *,
    log_dir: Path,
    launcher_output: str,
    exit_code: int,
    node_rank: int,
    procs_per_node: int,
    collective_timeout_s: int,
) -> str:
    """What to show when the training launcher exited with `exit_code` != 0 (see
    `first_failure` for which rank is blamed). A TrainError a rank raised is shown as its
    message alone: the worker words those for the user."""
    failure = first_failure(log_dir=log_dir, launcher_output=launcher_output)
    if failure is None:
        return (
            f"training launcher failed on node {node_rank} with exit code {exit_code} before "
            f"any rank reported an error; its last output:\n{tail_lines(launcher_output)}"
        )
    local_rank, how, detail = failure.local_rank, failure.how, failure.detail
    rank = node_rank * procs_per_node + local_rank
    if is_out_of_memory(detail):
        return out_of_memory_message(f"rank {rank} on node {node_rank}: {detail}")
    if how == "raised" and detail.startswith(_TRAIN_ERROR):
        # The worker's own words for a problem the user can fix (a run stopped by
        # train.step_health, a bad setting), which every rank words alike.
        return detail.removeprefix(_TRAIN_ERROR)
    message = f"training failed: rank {rank} (node {node_rank}, local rank {local_rank}) {how}:\n"
    message += detail
    if any(marker in detail for marker in _TIMEOUT_MARKERS):
        message += (
            f"\nA collective waited longer than train.collective_timeout_s "
            f"({collective_timeout_s} s): another rank died or stopped responding; its node's "
            "log shows why."
        )
    return message


def tail_lines(text: str, lines: int = _TAIL_LINES) -> str:
    """The last `lines` lines of a launcher's output, as failure messages quote it."""
    return _tail(text, lines)


def _describe_exit(code: int) -> str:
    if code < 0:
        name = _SIGNAL_NAMES.get(-code, "")
        return f"signal {-code}" + (f" ({name})" if name else "")
    return f"exit code {code}"


_SIGNAL_NAMES = {
    9: "SIGKILL: killed from outside, often by the kernel when host memory runs out",
    6: "SIGABRT",
    7: "SIGBUS",
    11: "SIGSEGV",
}


def _local_rank_of(path: Path) -> int:
    # torchrun's layout: <log dir>/<run id>/attempt_<n>/<local rank>/<file>
    try:
        return int(path.parent.name)
    except ValueError:
        return -1


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
