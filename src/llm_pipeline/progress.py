"""One-line status from inside a step, for the person watching a run.

A step runs in a process whose output the local runner reads line by line, beside KFP's
executor-input dump, DeepSpeed's start-up chatter and every rank's logs. A line that starts
with `MARK` is a status line: `pipeline.py` shows those by default and keeps the rest for
`--verbose` and the run's log file. On Vertex AI the same lines are ordinary log lines.
"""

import sys

#: Opens every status line; chosen so no library prints it by chance.
MARK = "::status:: "


def status(message: str) -> None:
    """Print `message` as the step's current status (one line, flushed at once)."""
    line = " ".join(message.split())
    print(f"{MARK}{line}", file=sys.stdout, flush=True)


def parse_status(line: str) -> str | None:
    """The message of a status line, None for any other line."""
    start = line.find(MARK)
    return line[start + len(MARK) :].rstrip("\n") if start >= 0 else None


def format_duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 02 min`: how long something took or will take."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
