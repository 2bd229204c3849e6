"""DeepSpeed's just-in-time compiled ops, loaded so that a killed loader cannot wedge the next.

DeepSpeed builds some ops on first use (`deepspeed_shm_comm`, the CPU communication op that
`deepspeed.init_distributed` loads; `cpu_adam` for offload) through
`torch.utils.cpp_extension.load`, which guards each op's build folder with a `FileBaton`: a
`lock` file created on entry and deleted on exit, taken on every load, even of an op already
built. A process killed between the two (SIGKILL, the OOM killer) leaves the file behind, and
from then on every load of that op on the machine waits in `FileBaton.wait` forever, silently.

`install()` wraps DeepSpeed's one JIT entry point (`OpBuilder.jit_load`) in an exclusive
`flock` on a file beside the op's build folder. The kernel drops a flock when its holder dies,
however it dies, so it never goes stale. Whoever holds it knows that any `lock` file in the
build folder belongs to a loader that is gone (every loader here takes the flock first), and
removes it before torch looks. Loaders outside this package that build the same op at the
same moment are not covered; they would not be either without this.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llm_pipeline.storage import held_flock

logger = logging.getLogger(__name__)

_installed = False


def build_folder(op_name: str) -> Path:
    """Where torch builds and loads `op_name` (TORCH_EXTENSIONS_DIR, else its cache)."""
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(op_name, verbose=False))


def load_exclusively(op_name: str, load: Callable[[], Any]) -> Any:
    """Run `load` holding the op's flock, after clearing a lock a dead loader left."""
    folder = build_folder(op_name)
    with held_flock(folder.parent / f".{op_name}.flock"):
        stale = folder / "lock"
        if stale.exists():
            logger.warning("removing the build lock %s that a killed process left", stale)
            stale.unlink(missing_ok=True)
        return load()


def install() -> None:
    """Make every DeepSpeed JIT op load in this process go through `load_exclusively`."""
    global _installed
    if _installed:
        return
    from deepspeed.ops.op_builder.builder import OpBuilder

    original = OpBuilder.jit_load

    @functools.wraps(original)
    def jit_load(self: Any, verbose: bool = True) -> Any:
        return load_exclusively(self.name, lambda: original(self, verbose))

    OpBuilder.jit_load = jit_load
    _installed = True
