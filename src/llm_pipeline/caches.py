"""The project's cache folder on this machine, chosen in one place for everything it keeps.

`$LLM_PIPELINE_CACHE_DIR` when set (its older name, `$LLM_PIPELINE_CACHE`, is still read),
else `$XDG_CACHE_HOME/llm-pipeline` when that is an absolute path (the XDG spec ignores a
relative one), else `~/.cache/llm-pipeline`. Each user of it takes a subfolder: the parsed
docstrings (`docstrings/`), remote checkpoints (`models/`), the bundle's wheels
(`bundle-wheels/`) and torch.compile's kernels (`inductor/`). Everything in it can be
rebuilt: `rm -r` of the folder, or of one subfolder, only costs time.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable naming the cache folder.
ENV_VAR = "LLM_PIPELINE_CACHE_DIR"
#: Its older name, read when ENV_VAR is unset (remote checkpoints' cache once used it).
OLD_ENV_VAR = "LLM_PIPELINE_CACHE"
#: The variable torch's inductor reads for where it keeps compiled kernels.
INDUCTOR_ENV_VAR = "TORCHINDUCTOR_CACHE_DIR"


def cache_folder(name: str) -> Path:
    """The subfolder `name` of the project's cache folder (not created)."""
    if override := os.environ.get(ENV_VAR) or os.environ.get(OLD_ENV_VAR):
        return Path(override).expanduser() / name
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "llm-pipeline" / name


def keep_compiled_kernels() -> Path:
    """Point torch.compile's kernel cache at this user's own `inductor/` cache, unless
    `$TORCHINDUCTOR_CACHE_DIR` already says where; returns the folder.

    Torch's default is `/tmp/torchinductor_<user>`, which it trusts without checking who
    made it (another user of the machine could leave compiled code there), and which a
    local run's private `TMPDIR` (`local/scratch.py`) removes with the run, so that each run
    compiled cold. The folder is made readable by this user alone.
    """
    if named := os.environ.get(INDUCTOR_ENV_VAR):
        return Path(named)
    folder = cache_folder("inductor")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ[INDUCTOR_ENV_VAR] = str(folder)
    return folder
