"""LoRA through PEFT: adapters on the model before training; after it, the merged model and
the adapter alone.

Indifferent to the model it is given: the plain `PeftModel` (no PEFT task type) passes the
Trainer's batch to the model's own `forward`, so a seq2seq and a causal LM train alike. What
a task adds to that comes from `Task.lora_options`: a classifier's head is new (or new to its
labels), so no frozen weights could stand in for it: it trains whole beside the adapters
(PEFT's `SEQ_CLS` task type with the head in `modules_to_save`), and merging puts the
trained head in the saved model.
Adapters take the dtype of the layer they adapt (`autocast_adapter_dtype=False`). PEFT's
default upcasts adapters on bf16 layers to fp32, and under ZeRO-3 the base's layers are bf16
as they load, so the parameters ZeRO-3 all-gathers together would mix dtypes, which broke
DeepSpeed 0.19.2's coalesced all-gather on GPUs (deepspeedai/DeepSpeed#8072; TRL passes the
same flag). DeepSpeed keeps fp32 master copies of what it trains, so nothing is lost.

Without DeepSpeed the Trainer trains the model as it is, under 16-bit autocast, which casts
every frozen weight again at each use. So there the frozen base is kept in the training
dtype and what trains (adapters, a classifier's head) in fp32 for the optimizer, as QLoRA and
PEFT's own examples do (`keep_frozen_in`): half the weight memory, no per-step casts, and the
same 16-bit matmuls autocast ran before. The merged model is then saved in that dtype, as
ZeRO-3 saves it.

Under ZeRO-3 every parameter is partitioned across the ranks, so the functions that read or
change weights after training are collectives: every rank calls them, and each gathers one
layer's parameters at a time (`GatheredParameters`, a no-op for unpartitioned parameters).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from llm_pipeline.config import LoraSettings
from llm_pipeline.errors import TrainError

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

#: The adapter's folder inside the trained model's folder: `adapter_config.json` and
#: `adapter_model.safetensors`, as PEFT saves them. Model loaders read the top folder only.
ADAPTER_FOLDER = "adapter"


def apply_lora(
    model: PreTrainedModel, settings: LoraSettings, *, options: Mapping[str, Any] | None = None
) -> PeftModel:
    """`model` with LoRA adapters on the layers `settings` names; every other weight frozen
    but what the task's `options` (`Task.lora_options`: a classifier's head in
    `modules_to_save`) train whole.

    Raises TrainError when a named layer is not in the model, listing the linear layers
    that are.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,  # type: ignore[arg-type]  # PEFT says int; a float works
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        **(options or {}),
    )
    try:
        return get_peft_model(model, config, autocast_adapter_dtype=False)
    except ValueError as err:
        reason = str(err).strip().splitlines()[0]
        raise TrainError(
            f"train.lora.target_modules: {reason} The linear layers of this "
            f"{type(model).__name__} are named: {', '.join(linear_layer_names(model))}"
        ) from err


def keep_frozen_in(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Frozen floating-point parameters to `dtype`, trainable ones to fp32, in place.

    For a run without DeepSpeed under 16-bit autocast, after the adapters are on and any
    freezing is done. Modules the model's class keeps in fp32 at that dtype (Hugging Face's
    `_keep_in_fp32_modules`: T5's `wo` under fp16) stay fp32, as `from_pretrained` leaves
    them. Tied weights are one parameter and stay tied. Buffers (rotary frequencies) are left.

    The adapters then take their 16-bit input as it comes. By default PEFT casts each
    adapter's input to the adapter's dtype: an fp32 copy of the layer's whole input, which
    autocast casts back to 16 bits for the adapter's matmul, so the product is the same
    and the two copies are waste. They are 1,524 of the 23,224 operations of a T5-large
    LoRA step, and 610 of the 9,750 of a 1.1B Llama's (`benchmarks/step_ops.py`): host work
    each step pays: on one H100 a T5-large LoRA step ran at the host's pace (`gpu_train.py`'s
    `host` 1.00), at 0.77x full fine-tuning's tokens/s.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    keep = set(_fp32_modules(model, dtype))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not param.is_floating_point():
                continue
            kept = param.requires_grad or not keep.isdisjoint(name.split("."))
            wanted = torch.float32 if kept else dtype
            if param.dtype != wanted:
                param.data = param.data.to(wanted)
    for module in model.modules():
        if isinstance(module, BaseTunerLayer):
            # Read by PEFT's `_cast_input_dtype` (what its `disable_input_dtype_casting` sets).
            module.cast_input_dtype_enabled = False  # type: ignore[assignment]


def zero3_leaf_adapters(model: torch.nn.Module) -> int:
    """Make each LoRA linear layer one ZeRO-3 module, its base weight and adapters fetched
    together; returns how many layers it marked. Under ZeRO-3 alone, after `apply_lora` and
    any freezing, before the DeepSpeed engine is built (the Trainer builds it in `train`).

    Why: ZeRO-3 hooks every module it meets, and PEFT turns each adapted linear into five
    called modules (the LoRA layer, its base layer, A, B, and the dropout or Identity), so
    a LoRA step made 2.7x the module fetches of full fine-tuning, each with its hooks'
    host-side bookkeeping, though it gathers no more weights (`deepspeed_config.
    persistence_threshold`). That host work is a cost per token full fine-tuning does not pay
    (LoRA trained a 1.1B Llama at 0.42x of full fine-tuning's tokens/s under ZeRO-3 on one
    H100; how much of that was this work is not measured there yet). As a
    ZeRO-3 leaf (`deepspeed.utils.set_z3_leaf_modules`) the layer is fetched and released
    once, its children unhooked, and its trained parameters are reduced together when its
    backward ends. Measured by `benchmarks/lora_gathers.py` (2 CPU ranks, a Llama of hidden
    64 and 2 layers): module fetches per step 169 -> 63, full fine-tuning's 63; gathers 13,
    as before and as full fine-tuning; losses and adapters after 6 steps the same.

    DeepSpeed 0.19.8 reduces a leaf's gradients in a full backward hook on the leaf
    (`stage3.py::create_reduce_and_remove_grad_hooks`, `reduce_leaf_module_grads`), which
    PyTorch fires once the gradients for the module's inputs are computed, after its
    weights' gradients, but, where no input requires a gradient, as soon as those for its
    outputs are: before the adapters have theirs. The first decoder layer's query, key and
    value projections are such layers (their input comes from the frozen embedding and
    norm), as are cross-attention's key and value over a frozen encoder. There the hook
    gave each adapter a zero gradient from `zeros_like` of the parameter, released to an
    empty tensor while ZeRO-3 records its trace in the first step, reduced that, and the
    real gradient then met it: "The size of tensor a (0) must match the size of tensor b
    (16)" (`lora_gathers.py --settings lora-leaf-bare`). So each marked layer that trains
    also gets a first forward pre-hook that, while autograd records, hands it a copy of its
    input that requires a gradient: the hook then fires after the adapters' gradients, at
    the cost of those layers' input gradients, which nothing uses.
    """
    from deepspeed.utils import set_z3_leaf_modules
    from peft.tuners.lora import Linear as LoraLinear

    leaves = set_z3_leaf_modules(model, [LoraLinear], raise_if_not_found=False)
    for leaf in leaves:
        if any(p.requires_grad for p in leaf.parameters()):
            leaf.register_forward_pre_hook(_input_requires_grad, prepend=True)
    return len(leaves)


def _input_requires_grad(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """`args` with a floating-point first input that requires no gradient replaced by a copy
    that does, while autograd records (`zero3_leaf_adapters`)."""
    if not args or not torch.is_grad_enabled():
        return None
    first = args[0]
    if not isinstance(first, torch.Tensor) or first.requires_grad or not first.is_floating_point():
        return None
    return (first.detach().requires_grad_(), *args[1:])


def _fp32_modules(model: torch.nn.Module, dtype: torch.dtype) -> list[str]:
    """The module names `model`'s Hugging Face class keeps in fp32 when loaded in `dtype`."""
    base = model.get_base_model() if is_lora(model) else model  # type: ignore[operator]
    plan = getattr(base, "_get_dtype_plan", None)
    return list(plan(dtype)) if callable(plan) else []


def is_lora(model: torch.nn.Module) -> bool:
    """Whether `model` is wrapped with adapters (`apply_lora`)."""
    from peft import PeftModel

    return isinstance(model, PeftModel)


def linear_layer_names(model: torch.nn.Module) -> list[str]:
    """The distinct last names of `model`'s linear layers: what `target_modules` can name."""
    from transformers.pytorch_utils import Conv1D

    names = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear | Conv1D)
    }
    return sorted(names)


def save_adapter(model: PeftModel, folder: str | Path) -> None:
    """Write the adapter alone (PEFT's `save_pretrained`) from global rank 0. A collective.

    Only the adapter's parameters (those that train) are gathered, not the model's.
    """
    import deepspeed
    import torch.distributed as dist

    trained = [p for p in model.parameters() if p.requires_grad]
    with deepspeed.zero.GatheredParameters(trained):
        if dist.get_rank() == 0:
            # save_embedding_layers=False: "auto" would look the base model up (on the hub,
            # for a hub id) to see whether its vocabulary changed; no embedding is adapted.
            model.save_pretrained(str(folder), save_embedding_layers=False)


def merge_into_base(model: PeftModel) -> tuple[PreTrainedModel, str]:
    """Fold each adapter into the weight it adapts and take the adapters out. A collective.

    Returns the base model (changed in place, now holding the merged weights) and its
    prefix in `model`'s state dict, which is what `Accelerator.get_state_dict` returns for
    the wrapped model. Each adapted layer is gathered whole on every rank while it merges;
    under ZeRO-3 rank 0's result is then partitioned again.
    """
    import deepspeed
    from peft.tuners.lora import LoraLayer

    for module in model.modules():
        if isinstance(module, LoraLayer):
            with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=0):
                module.merge()
    base: PreTrainedModel = model.unload()
    prefix = next(name for name, module in model.named_modules() if module is base)
    return base, f"{prefix}."


def without_prefix(state_dict: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The entries of `state_dict` under `prefix`, named as the module there names them."""
    return {
        key.removeprefix(prefix): value
        for key, value in state_dict.items()
        if key.startswith(prefix)
    }
