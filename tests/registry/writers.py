"""Starting `local_writer.py` in its own process and waiting for what it writes: the
registry's tests of writers that race, are killed, or hold a lock."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

WRITER = Path(__file__).with_name("local_writer.py")


def start_writer(*args: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WRITER), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for(path: Path, writer: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if writer.poll() is not None:
            _, err = writer.communicate()
            pytest.fail(f"writer exited with {writer.returncode}: {err.decode()}")
        assert time.monotonic() < deadline, f"writer never wrote {path}"
        time.sleep(0.01)
