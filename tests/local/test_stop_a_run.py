"""Ctrl-C (SIGINT to the CLI's process group) and SIGTERM to the CLI alone (`kill <pid>`, an
IDE's stop button) during finetune, through `python pipeline.py` as a user runs it: the whole
run ends (no process it started is left), with no traceback, one line that says what was
stopped, what was kept and how to clean up, the run's log and report written, no temporary
folder left, and the shell's exit code for the signal."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ..docstring_data import DocstringData
from ..pipeline_cli import PIPELINE, REPO

#: Seconds from the signal to the CLI's exit that a test allows: the stopper's grace (30 s)
#: and the summary, on a loaded machine. On an idle one it takes a few seconds.
STOP_BOUND_S = 60
_MARK = "LLM_PIPELINE_TEST_RUN"


def _left_behind(mark: str) -> list[str]:
    """Command lines of the processes that carry `mark` in their environment."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"{_MARK}={mark}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One pipeline root for both runs: the second reuses the first's download and
    preprocess (KFP's cache), seconds less before its finetune starts."""
    return tmp_path_factory.mktemp("runs")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "to_group", "code"),
    [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
    ids=["ctrl-c-to-the-group", "sigterm-to-the-cli-alone"],
)
def test_a_signal_during_finetune_ends_the_whole_run(
    signum: int,
    to_group: bool,
    code: int,
    tmp_path: Path,
    runs_root: Path,
    docstring_data: DocstringData,
) -> None:
    mark, temp, root = uuid.uuid4().hex, tmp_path / "tmp", runs_root
    temp.mkdir()
    earlier = set(root.iterdir())
    overrides = [
        f"data.dataset={docstring_data.folder}",
        "train.max_steps=100000",  # far more than the test waits for
        "train.logging_steps=1",
        "train.save_steps=1",  # a complete checkpoint by the second step's line
        "evaluate.max_samples=4",
        f"deploy.registry_dir={root / 'registry'}",
    ]
    command = [sys.executable, str(PIPELINE), "--config", str(REPO / "configs" / "local.json")]
    command += [arg for item in overrides for arg in ("--set", item)]
    command += ["--pipeline-root", str(root)]
    cli = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={**os.environ, _MARK: mark, "TMPDIR": str(temp)},
        start_new_session=True,  # a process group of its own, as a terminal gives a command
    )
    assert cli.stdout is not None
    before = []
    for line in cli.stdout:
        before.append(line)
        if "step 2/" in line:
            break
    else:
        pytest.fail("training never reached its second step:\n" + "".join(before))
    assert _left_behind(mark), "the run's processes carry the mark"

    (os.killpg if to_group else os.kill)(cli.pid, signum)
    sent = time.monotonic()
    rest = cli.stdout.read()
    returncode = cli.wait(timeout=STOP_BOUND_S)
    took = time.monotonic() - sent
    output = "".join(before) + rest

    assert returncode == code, output[-3000:]
    assert took < STOP_BOUND_S
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    last = output.rstrip().splitlines()[-1]
    name = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}[signum]
    assert last.startswith(f"{name}: stopped finetune and every process it started; kept "), last
    # Run from another folder: the commands name the script as it was run.
    clean = f"clean up: python {PIPELINE} clean --pipeline-root {root}"
    assert last.endswith(clean), last
    # The checkpoint it names is complete, and the command it prints resumes from its folder.
    kept = last.split("; kept ")[1].split("; resume: ")[0]
    checkpoint_name, folder = kept.split(" in ")
    assert (Path(folder) / checkpoint_name / "COMPLETE.json").is_file()
    resume = shlex.split(last.split("; resume: ")[1].split("; clean up: ")[0])
    assert f"train.checkpoint_dir={Path(folder).parent}" in resume
    assert f"Stopping the run ({name}): training saves a checkpoint at its next step" in output
    assert "■ finetune stopped after " in output and "finetune failed after" not in output
    assert "[STOP] finetune" in output and "Pipeline stopped" in output
    assert "Kept on disk: " in output

    deadline = time.monotonic() + 10
    while (left := _left_behind(mark)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], left
    (run_dir,) = [p for p in set(root.iterdir()) - earlier if p.name.startswith("llm-pipeline-")]
    assert (run_dir / "pipeline.log").is_file()
    report = (run_dir / "report.html").read_text()
    assert "<td>finetune</td><td>stopped</td>" in report
    # Nothing of the run's in the temp folder; torch's cache, one per user, may be there.
    left_files = [p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_")]
    assert left_files == [], "temporary folders left behind"
