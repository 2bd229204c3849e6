"""What a local run prints while it works: one line per step event, the rest to a log file.

KFP's local runner prints everything to standard output: its own log lines (a task starts,
ends, is served from the cache), then each step's output, which holds the executor-input
JSON, DeepSpeed's start-up and every rank's logging. `StepConsole` stands in for
`sys.stdout` during the run. Every line goes to the run's log file; the terminal gets a line
when a step starts and ends (with its duration), the steps' status lines
(`llm_pipeline.progress`), the warnings the step's own process logs (KFP's executor logs
them as `[KFP Executor <time> WARNING]: ...`: dropped rows, a missing test split, a
classification head trained from scratch, what the user's data and settings caused), and,
when a step fails, its error first, then its last lines (KFP's executor-input JSON left
out). With `verbose`, the terminal gets everything, as KFP prints it.
"""

from __future__ import annotations

import io
import re
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from llm_pipeline.progress import format_duration, parse_status

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STARTED = re.compile(r"Executing task '([^']+)'")
_FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
#: KFP's line for a step served from its cache: the task and the start of the cache key.
CACHE_HIT = re.compile(r"Task (\S+) cache hit \(key=([0-9a-f]+)\)")
#: A record the step's own process logged (KFP's executor configures its logging so).
_EXECUTOR_LOG = re.compile(r"\[KFP Executor [^\]]* (\w+)\]: ?(.*)")
_INPUT_DUMP = "Got executor_input:"
#: How a step says why it failed: its own report of a user's mistake (steps/reporting.py),
#: or the last line of a traceback.
_USER_ERROR = re.compile(r"^\s*ERROR: (.+)")
#: A problem a config error lists under its first line.
_LISTED = re.compile(r"^\s*- ")
_EXCEPTION = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)")
#: How a step served from KFP's cache is described, wherever a run is shown.
REUSED = "reused: same inputs as an earlier run"
#: Lines of a failed step's own output shown under it (its error is among the last).
TAIL_LINES = 15


@dataclass
class StepTiming:
    """When a step started and ended (monotonic seconds), and whether the cache served it."""

    started: float
    ended: float | None = None
    #: The start of KFP's cache key when the cache served the step.
    cache_key: str | None = None

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started


@dataclass
class StepConsole(io.TextIOBase):
    """A text stream that shows a run's progress on `terminal` and logs all to `log`."""

    terminal: TextIO
    log: TextIO
    verbose: bool = False
    timings: dict[str, StepTiming] = field(default_factory=dict)
    _partial: str = ""
    _current: str | None = None
    #: The run is being stopped (Ctrl-C, SIGTERM): a step that ends now was stopped.
    _stopping: bool = False
    _tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    #: Why the current step failed, as it said it (its user error, else its exception),
    #: one entry per line (a config error lists its problems below its first line).
    _error: list[str] = field(default_factory=list)
    _user_error: bool = False
    #: The closing line of the executor-input JSON being skipped, while inside it.
    _dump_end: str | None = None

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.log.write(_ANSI.sub("", text))
        if self.verbose:
            self.terminal.write(text)
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            self._line(_ANSI.sub("", line))
        return len(text)

    def flush(self) -> None:
        self.log.flush()
        self.terminal.flush()

    def _line(self, line: str) -> None:
        if started := _STARTED.search(line):
            self._start(started.group(1))
        elif finished := _FINISHED.search(line):
            self._finish(finished.group(1), finished.group(2))
        elif cached := CACHE_HIT.search(line):
            self._served_from_cache(cached.group(1), cached.group(2))
        elif (message := parse_status(line)) is not None:
            self._show(f"    {message}")
        elif self._current is not None and line.strip():
            self._step_line(line)

    def _step_line(self, line: str) -> None:
        """A line of the running step's own output: a warning is shown, the rest kept as its
        last lines but for KFP's executor-input JSON and log records, which say nothing of
        a failure."""
        if self._skipping_input_dump(line):
            return
        if record := _EXECUTOR_LOG.search(line):
            level, message = record.groups()
            if level == "WARNING":
                self._show(f"    warning: {message}")
            elif _INPUT_DUMP in message:
                self._dump_end = ""  # the next line opens the JSON, at the indent it closes
            return
        if user := _USER_ERROR.match(line):
            self._error, self._user_error = [user.group(1)], True
        elif self._user_error and _LISTED.match(line):
            self._error.append(line.strip())
        elif (raised := _EXCEPTION.match(line)) and not self._user_error:
            self._error = [f"{raised.group(1)}: {raised.group(2)}"]
        self._tail.append(line)

    def _skipping_input_dump(self, line: str) -> bool:
        """Whether `line` belongs to the executor-input JSON (from its `{` to its `}`)."""
        if self._dump_end is None:
            return False
        if self._dump_end == "":
            if line.strip() != "{":
                self._dump_end = None
                return False
            self._dump_end = line.rstrip()[:-1] + "}"
        elif line.rstrip() == self._dump_end:
            self._dump_end = None
        return True

    def _start(self, name: str) -> None:
        self._current = name
        self._tail.clear()
        self._error, self._user_error, self._dump_end = [], False, None
        self.timings[name] = StepTiming(started=time.monotonic())
        self._show(f"▸ {name}")

    def _finish(self, name: str, state: str) -> None:
        timing = self.timings.setdefault(name, StepTiming(started=time.monotonic()))
        timing.ended = time.monotonic()
        took = format_duration(timing.seconds)
        if state == "SUCCESS":
            self._show(f"✓ {name} ({took})")
        elif self._stopping:
            self._show(f"■ {name} stopped after {took}")
        else:
            first, *more = self._error or [""]
            first = first.removeprefix(f"{name} failed: ")
            self._show(f"✗ {name} failed after {took}" + (f": {first}" if first else ""))
            for line in more:
                self._show(f"    {line}")
            if not self._user_error:  # a user's mistake is said whole; a bug needs context
                self._show("    its last lines:")
                for line in self._tail:
                    self._show(f"    | {line.strip()}")
        self._current = None

    def _served_from_cache(self, name: str, key: str) -> None:
        now = time.monotonic()
        self.timings[name] = StepTiming(started=now, ended=now, cache_key=key)
        self._show(f"✓ {name} ({REUSED})")

    def stopping(self, line: str) -> None:
        """Say that the run is being stopped, and why (`line`), in verbose mode too; the
        steps that end from now on were stopped, not failed (no last lines shown)."""
        self._stopping = True
        self.log.write(line + "\n")
        self.terminal.write(line + "\n")
        self.flush()

    def _show(self, line: str) -> None:
        if not self.verbose:
            self.terminal.write(line + "\n")
            self.terminal.flush()


def open_log(folder: Path) -> TextIO:
    """A new log file for a run under `folder` (moved into the run's folder at the end)."""
    folder.mkdir(parents=True, exist_ok=True)
    return (folder / f"run-{time.strftime('%Y%m%d-%H%M%S')}.log").open("w", encoding="utf-8")
