"""The smallest valid config, and ways to change it one thing at a time, for config tests."""

import copy
import subprocess
from pathlib import Path
from typing import Any

from ..pipeline_cli import run_pipeline

REPO = Path(__file__).resolve().parents[2]

MINIMAL: dict[str, Any] = {
    "data": {"dataset": "abisee/cnn_dailymail", "columns": {"document": "a", "summary": "h"}},
    "model": {"source": "google-t5/t5-small"},
}


def with_change(path: str, value: Any) -> dict[str, Any]:
    """MINIMAL plus one change at a dotted path (value `...` deletes the key)."""
    raw = copy.deepcopy(MINIMAL)
    *parents, leaf = path.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    if value is ...:
        del node[leaf]
    else:
        node[leaf] = value
    return raw


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """`python pipeline.py ARGS` in its own process, as a user runs it."""
    return run_pipeline(*args, cwd=cwd)
