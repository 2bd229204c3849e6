"""What the bundle's commands start ends with them, however they end: each is SIGKILLed
while its child runs (a child here is a script that only sleeps)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

#: Each starts argv[1] (the sleeper) as the bundle's code starts its child, and waits for it.
STARTERS = {
    "pip download, the wheel cache's fetch": (
        "import sys\nfrom llm_pipeline.bundle import wheels\nwheels._pip([sys.argv[1]])\n"
    ),
    "pip wheel, the project's own": (
        "import sys\n"
        "from pathlib import Path\n"
        "from llm_pipeline.bundle import build\n"
        "sys.executable = sys.argv[1]\n"
        "build._project_wheel(Path('.'), Path('.'))\n"
    ),
    "pipeline.py, run on the GPU machine": (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from llm_pipeline.bundle import build, machine\n"
        "bundle = Path(sys.argv[2])\n"
        "(bundle / 'project').mkdir()\n"
        "(bundle / 'project' / 'c.json').write_text('{}')\n"
        "(bundle / build.MANIFEST).write_text(json.dumps({'datasets': {}}))\n"
        "machine.pipeline_command = lambda *args: [sys.argv[1]]\n"
        "machine.run_pipeline(bundle, Path('c.json'), [])\n"
    ),
}


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("starter", list(STARTERS), ids=list(STARTERS))
def test_the_child_dies_with_a_killed_bundle_command(starter: str, tmp_path: Path) -> None:
    """Each outlived a SIGKILLed command: pip went on downloading into a folder nobody would
    read, a GPU run went on training (the GPU held) with no one to see it end."""
    sleeper = tmp_path / "sleeper"
    sleeper.write_text("#!/bin/sh\nexec sleep 600\n")
    sleeper.chmod(0o755)
    (tmp_path / "bundle").mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", STARTERS[starter], str(sleeper), str(tmp_path / "bundle")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not children and parent.poll() is None and time.monotonic() < deadline:
            children = psutil.Process(parent.pid).children()
            time.sleep(0.05)
        assert children, f"no child started (exit code {parent.poll()})"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while not all(map(_gone, children)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(map(_gone, children)), "the child outlived the command that started it"
    finally:
        parent.kill()
        for child in children:
            if not _gone(child):
                child.kill()
