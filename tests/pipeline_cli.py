"""`python pipeline.py ARGS` as a user runs it, from the repository, for tests of the CLI."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PIPELINE = REPO / "pipeline.py"


def run_pipeline(
    *args: str, timeout: float = 120, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in its own process to the end; its exit code and output, as text."""
    return subprocess.run(
        [sys.executable, str(PIPELINE), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
