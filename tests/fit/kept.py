"""What autograd keeps for backward, counted: the fit check's activation formulas are held to
it (seq2seq, causal LM and classifier tests alike)."""

from collections.abc import Callable

import torch


def bytes_kept_for_backward(model: torch.nn.Module, forward: Callable[[], object]) -> int:
    """Bytes of every tensor autograd keeps for backward while `forward` runs `model`, by
    storage (a tensor and its views count once), the model's weights excluded."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        kept[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    return sum(size for storage, size in kept.items() if storage not in weights)
