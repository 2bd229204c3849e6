"""LoRA's adapters on a model, counted from its architecture as PEFT would make them.

PEFT gives every targeted module an `A` (r x in) and a `B` (out x r): r·(in + out) trained
parameters per module, while the module's own weights stay frozen. Which modules are
targeted follows PEFT's own rules: `"all-linear"` is every `nn.Linear` and `Conv1D` but the
output layer (`tuners_utils._maybe_include_all_linear_layers`), and a list of names is
matched by PEFT's `check_target_module_exists` (a module whose name is, or ends with, one of
them); an `nn.Embedding` so named gets an embedding adapter, r·(num + dim). Counting on the
meta-device model that `shapes` builds takes milliseconds, where `get_peft_model` takes
seconds on a 7B model; `tests/fit/test_adapters.py` checks the counts against PEFT's.

A classifier's head trains whole beside the adapters (`train/lora.py` puts it in PEFT's
`modules_to_save`, which PEFT then leaves unadapted): its parameters count as trained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from torch import nn

    from llm_pipeline.config import LoraSettings

StackName = Literal["encoder", "decoder"]


@dataclass(frozen=True)
class Adapters:
    """What trains under LoRA, and what the adapted layers keep for backward."""

    parameters: int  # trained parameters: every adapter's A and B
    largest: int  # the largest trained tensor (DeepSpeed's largest layer among what trains)
    largest_adapter: int  # the largest A or B alone (the ZeRO-3 persistence threshold's)
    rank: int
    dropout: bool  # adapter dropout on (each adapted layer keeps its mask and output)
    inputs: tuple[tuple[StackName, int], ...]  # Σ input width of the adapted linears, by stack
    linears: tuple[tuple[StackName, int], ...]  # adapted linears, by stack

    def per_layer(self, stack: StackName, layers: int) -> tuple[float, float]:
        """(input width, linears) adapted in one layer of `stack`, on average."""
        if layers == 0:
            return 0.0, 0.0
        inputs = sum(n for name, n in self.inputs if name == stack)
        linears = sum(n for name, n in self.linears if name == stack)
        return inputs / layers, linears / layers


def count_adapters(model: nn.Module, lora: LoraSettings, *, whole: Sequence[str] = ()) -> Adapters:
    """The adapters `lora` puts on `model` (built on the meta device: nothing is allocated),
    beside the modules named in `whole` (a classifier's head), which train whole."""
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    targeted = {
        name
        for name in _targeted(model, lora)
        if not any(name == head or name.startswith(f"{head}.") for head in whole)
    }
    encoder = _encoder_modules(model)
    r = lora.r
    parameters, largest, largest_adapter = 0, 0, 0
    for head in whole:
        sizes = [p.numel() for p in model.get_submodule(head).parameters()]
        parameters += sum(sizes)
        largest = max([largest, *sizes])
    inputs: dict[StackName, int] = {"encoder": 0, "decoder": 0}
    linears: dict[StackName, int] = {"encoder": 0, "decoder": 0}
    for name, module in model.named_modules():
        if name not in targeted:
            continue
        if isinstance(module, nn.Embedding):
            size_in, size_out = module.num_embeddings, module.embedding_dim
        elif isinstance(module, Conv1D):  # GPT-2's: weight (in, out)
            size_in, size_out = module.weight.shape
        elif isinstance(module, nn.Linear):
            size_in, size_out = module.in_features, module.out_features
        else:  # a layer type PEFT's LoRA does not take is not adapted by this project
            continue
        parameters += r * (size_in + size_out)
        largest_adapter = max(largest_adapter, r * size_in, r * size_out)
        largest = max(largest, largest_adapter)
        if not isinstance(module, nn.Embedding):  # embedding adapters have no dropout
            stack: StackName = "encoder" if id(module) in encoder else "decoder"
            inputs[stack] += int(size_in)
            linears[stack] += 1
    return Adapters(
        parameters=int(parameters),
        largest=int(largest),
        largest_adapter=int(largest_adapter),
        rank=r,
        dropout=lora.dropout > 0,
        inputs=tuple(inputs.items()),
        linears=tuple(linears.items()),
    )


def _targeted(model: nn.Module, lora: LoraSettings) -> set[str]:
    """Names of the modules PEFT would adapt."""
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    if lora.target_modules == "all-linear":
        get_output = getattr(model, "get_output_embeddings", None)
        output = get_output() if callable(get_output) else None
        return {
            name
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear | Conv1D) and module is not output
        }
    config = LoraConfig(r=lora.r, target_modules=list(lora.target_modules))
    return {
        name
        for name, _ in model.named_modules()
        if name and bool(check_target_module_exists(config, name))
    }


def _encoder_modules(model: Any) -> set[int]:
    """ids of an encoder-decoder's encoder modules (none for a decoder-only model)."""
    if not getattr(model.config, "is_encoder_decoder", False):
        return set()
    return {id(module) for module in model.get_encoder().modules()}
