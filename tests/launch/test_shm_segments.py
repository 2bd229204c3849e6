"""DeepSpeed's CPU all-reduce segments are swept once no process maps them."""

import os
import subprocess
import sys
import time
from pathlib import Path

from llm_pipeline.launch.shm_segments import PREFIX, remove_stale_segments

#: Maps the file named in argv[1], says so, and holds it until stdin closes.
_HOLDER = (
    "import mmap, sys\n"
    "f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 0)\n"
    "print('mapped', flush=True); sys.stdin.read()\n"
)


def _segment(folder: Path, name: str, *, age_s: float) -> Path:
    path = folder / name
    path.write_bytes(b"\0" * 4096)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_only_old_unmapped_segments_of_this_user_are_removed(tmp_path: Path) -> None:
    uid = os.getuid()
    stale = _segment(tmp_path, f"{PREFIX}_{uid}_127.0.0.1_29500_0", age_s=600)
    held = _segment(tmp_path, f"{PREFIX}_{uid}_127.0.0.1_29500_1", age_s=600)
    young = _segment(tmp_path, f"{PREFIX}_{uid}_127.0.0.1_29501_0", age_s=1)
    others = _segment(tmp_path, f"{PREFIX}_{uid + 1}_127.0.0.1_29500_0", age_s=600)
    unrelated = _segment(tmp_path, "torch_shm_0", age_s=600)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(held)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "mapped\n"
        assert remove_stale_segments(tmp_path) == [stale.name]
        assert [p.exists() for p in (stale, held, young, others, unrelated)] == [
            False,
            True,
            True,
            True,
            True,
        ]
    finally:
        holder.communicate("")
    # Its rank gone, the held one goes too.
    assert remove_stale_segments(tmp_path) == [held.name]
