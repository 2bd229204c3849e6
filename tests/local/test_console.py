"""A local run's terminal shows one line per step event and the steps' status lines; the
log file keeps everything."""

import io

from llm_pipeline.local.console import StepConsole
from llm_pipeline.progress import MARK

KFP_OUTPUT = [
    "\x1b[36m12:00:00.001 - INFO - Executing task 'download'\x1b[0m\n",
    "12:00:00.002 - INFO - Streamed logs:\n",
    '    {"inputs": {"parameterValues": {"data": "..."}}, "outputs": {}}\n',
    f"    {MARK}reading builtin:docstrings\n",
    "    [rank0]: some DeepSpeed chatter\n",
    "12:00:05.000 - INFO - Task 'download' finished with status \x1b[32mSUCCESS\x1b[0m\n",
    "Task preprocess cache hit (key=0123456789ab); skipping execution.\n",
    "12:00:06.000 - INFO - Executing task 'finetune'\n",
    "    Traceback (most recent call last):\n",
    "    ValueError: bad things\n",
    "12:00:07.000 - INFO - Task 'finetune' finished with status FAILURE\n",
]


def _play(verbose: bool) -> tuple[StepConsole, str, str]:
    terminal, log = io.StringIO(), io.StringIO()
    console = StepConsole(terminal=terminal, log=log, verbose=verbose)
    for chunk in KFP_OUTPUT:
        # Output arrives in pieces that do not follow line ends.
        middle = len(chunk) // 2
        console.write(chunk[:middle])
        console.write(chunk[middle:])
    return console, terminal.getvalue(), log.getvalue()


def test_terminal_shows_steps_status_and_a_failed_steps_last_lines() -> None:
    console, shown, log = _play(verbose=False)
    lines = shown.splitlines()
    assert lines[0] == "▸ download"
    assert lines[1] == "    reading builtin:docstrings"
    assert lines[2].startswith("✓ download (")
    assert lines[3] == "✓ preprocess (reused: same inputs as an earlier run)"
    assert lines[4] == "▸ finetune"
    assert lines[5].startswith("✗ finetune failed after")
    assert lines[6:] == [
        "    | Traceback (most recent call last):",
        "    | ValueError: bad things",
    ]
    assert "parameterValues" not in shown and "DeepSpeed" not in shown
    assert "parameterValues" in log and "\x1b[" not in log
    assert console.timings["preprocess"].cache_key == "0123456789ab"
    assert console.timings["download"].ended is not None


def test_verbose_shows_everything_as_kfp_prints_it() -> None:
    console, shown, _ = _play(verbose=True)
    assert shown == "".join(KFP_OUTPUT)
    assert set(console.timings) == {"download", "preprocess", "finetune"}
