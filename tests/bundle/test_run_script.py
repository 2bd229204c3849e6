"""The bundle's `run.sh` on the machine, with a stand-in Python that only records what it runs."""

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: A Python that installs by writing one file per wheel into --target, and runs nothing else.
STAND_IN = """#!/bin/sh
echo "$*" >> "$CALLS"
if [ "$1 $2 $3" = "-m pip install" ]; then
  while [ "$1" != "--target" ]; do shift; done
  mkdir -p "$2/whole_package" && touch "$2/whole_package/__init__.py"
fi
"""


def test_an_install_killed_part_way_is_redone_whole(tmp_path: Path) -> None:
    """pip --target moves each package into site/ one by one and skips a folder already
    there: a run killed while it moved left half a package (no `.installed` marker), which
    the next run's install kept. The next run starts from an empty site/ instead."""
    bundle = tmp_path / "bundle"
    (bundle / "whl").mkdir(parents=True)
    (bundle / "whl" / "whole_package-1.0-py3-none-any.whl").touch()
    (bundle / "project" / "benchmarks").mkdir(parents=True)
    shutil.copy2(REPO / "containers" / "gpu-bundle" / "run.sh", bundle / "run.sh")
    half = bundle / "site" / "half_package"
    half.mkdir(parents=True)
    (half / "__init__.py").write_text("# cut short by a kill\n")
    python = tmp_path / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "CALLS": str(tmp_path / "calls")}
    done = subprocess.run(
        ["sh", str(bundle / "run.sh"), "--tiny"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (bundle / "site").iterdir()) == [".installed", "whole_package"]
