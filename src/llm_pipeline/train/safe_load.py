"""Resume without unpickling: DeepSpeed's checkpoint files loaded with `weights_only=True`.

What resume reads, and how:
- the Trainer's `rng_state_<rank>.pth`, `scheduler.pt`, `optimizer.pt`: `torch.load(...,
  weights_only=True)` in transformers itself (5.x), RNG states under its numpy allowlist;
- `trainer_state.json`, `latest`: JSON and text;
- DeepSpeed's `*_model_states.pt` and `*_optim_states.pt`: DeepSpeed's TorchCheckpointEngine
  passes `weights_only=False`, a full unpickle that runs whatever a file names. `install()`
  replaces that one method with a `weights_only=True` load that allows exactly the DeepSpeed
  classes those files hold (an enum, the loss scalers and ZeRO-1/2's fragment addresses,
  plain attribute bags);
- `training_args.bin` (a pickle the Trainer writes) is never read back.
A checkpoint under a shared bucket is only as trusted as everyone who can write there; this
keeps a tampered file from becoming code execution.
"""

from __future__ import annotations

from typing import Any

import torch

_installed = False


def allowed_globals() -> list[Any]:
    """DeepSpeed classes its checkpoints pickle, besides tensors and containers."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [ZeroStageEnum, LossScaler, DynamicLossScaler, fragment_address]


def safe_torch_load(path: str, map_location: Any = None) -> Any:
    """`torch.load` that only rebuilds tensors, containers and the allowed DeepSpeed classes."""
    with torch.serialization.safe_globals(allowed_globals()):
        return torch.load(path, map_location=map_location, weights_only=True)


def install() -> None:
    """Make DeepSpeed's TorchCheckpointEngine load with `safe_torch_load` in this process."""
    global _installed
    if _installed:
        return
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import (
        TorchCheckpointEngine,
    )

    def load(self: Any, path: str, map_location: Any = None) -> Any:
        return safe_torch_load(path, map_location=map_location)

    TorchCheckpointEngine.load = load
    _installed = True
