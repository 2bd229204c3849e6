"""A local run's terminal shows one line per step event and the steps' status lines; the
log file keeps everything."""

import io
import re

from llm_pipeline.local.console import StepConsole
from llm_pipeline.progress import MARK

EXECUTOR = "    [KFP Executor 2026-11-26 12:00:00,894 {}]: {}\n"
#: KFP's executor-input dump, as the executor logs it at a step's start.
INPUT_DUMP = [
    EXECUTOR.format("INFO", 'Loading KFP component "finetune" from /tmp/x/ephemeral.py'),
    EXECUTOR.format("INFO", "Got executor_input:"),
    "    {\n",
    '        "inputs": {"parameterValues": {"data": "..."}},\n',
    '        "outputs": {\n',
    "        }\n",
    "    }\n",
]
KFP_OUTPUT = [
    "\x1b[36m12:00:00.001 - INFO - Executing task 'download'\x1b[0m\n",
    "12:00:00.002 - INFO - Streamed logs:\n",
    '    {"inputs": {"parameterValues": {"data": "..."}}, "outputs": {}}\n',
    f"    {MARK}reading builtin:docstrings\n",
    EXECUTOR.format("WARNING", "my.csv has no split 'test': no test split; evaluate will ..."),
    "    [rank0]: some DeepSpeed chatter\n",
    "12:00:05.000 - INFO - Task 'download' finished with status \x1b[32mSUCCESS\x1b[0m\n",
    "Task preprocess cache hit (key=0123456789ab); skipping execution.\n",
    "12:00:06.000 - INFO - Executing task 'finetune'\n",
    *INPUT_DUMP,
    "    Traceback (most recent call last):\n",
    "    ValueError: bad things\n",
    "12:00:07.000 - INFO - Task 'finetune' finished with status FAILURE\n",
]


def _play(verbose: bool, output: list[str] = KFP_OUTPUT) -> tuple[StepConsole, str, str]:
    terminal, log = io.StringIO(), io.StringIO()
    console = StepConsole(terminal=terminal, log=log, verbose=verbose)
    for chunk in output:
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
    # A warning about the user's data is part of the step's progress.
    assert lines[2] == "    warning: my.csv has no split 'test': no test split; evaluate will ..."
    assert lines[3].startswith("✓ download (")
    assert lines[4] == "✓ preprocess (reused: same inputs as an earlier run)"
    assert lines[5] == "▸ finetune"
    # The error first, then the step's last lines without KFP's executor-input JSON.
    assert re.fullmatch(r"✗ finetune failed after \d+ s: ValueError: bad things", lines[6])
    assert lines[7:] == [
        "    its last lines:",
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


def test_a_users_mistake_is_shown_whole_and_alone() -> None:
    """A step that stops on a user's error says it (steps/reporting.py: `ERROR: ...`, a
    config error's problems under it); its other lines stay in the log."""
    output = [
        "12:00:00.000 - INFO - Executing task 'configure'\n",
        *INPUT_DUMP,
        "    Generating train split: 100 examples\n",
        "    ERROR: configure failed: 2 problems in pipeline parameters:\n",
        "      - train_epochs: must be > 0.0, got -1\n",
        "      - train_learning_rate: must be > 0.0, got 0\n",
        "12:00:02.000 - ERROR - Task 'configure' finished with status FAILURE\n",
    ]
    _, shown, log = _play(verbose=False, output=output)
    lines = shown.splitlines()
    assert lines[0] == "▸ configure"
    assert re.fullmatch(
        r"✗ configure failed after \d+ s: 2 problems in pipeline parameters:", lines[1]
    )
    assert lines[2:] == [
        "    - train_epochs: must be > 0.0, got -1",
        "    - train_learning_rate: must be > 0.0, got 0",
    ]
    assert "Generating train split" in log
