"""Model states per training process: weights, gradients, optimizer, under ZeRO or not.

Under DeepSpeed the figures are DeepSpeed's own (`estimate_zero3_model_states_mem_needs`,
the function `estimate_zero3_model_states_mem_needs_all_cold` prints, and its ZeRO-1/2
sibling in `stage_1_and_2.py`), which assume 16-bit weights and gradients beside fp32
master weights and Adam (2 + 2 + 4 + 4 + 8 bytes per parameter, spread over the ranks by
stage). Three things they leave out are added, each under its own name:

* fp32 training: the 16-bit copies are 4 bytes each;
* ZeRO-3 keeps up to `stage3_max_live_parameters` gathered (the finetune step sets 1e9, as
  Hugging Face recommends: a model below that stays whole on every rank after step one),
  and under LoRA every adapter whole beside them (`train/deepspeed_config.py`'s
  persistence threshold);
* ZeRO-1 does not partition gradients (the estimator is ZeRO-2's).

Without DeepSpeed the Trainer keeps fp32 weights, gradients and AdamW's two moments for
what trains, DDP's gradient buckets when there are several processes, and under bf16/fp16
autocast a 16-bit copy of the weights that train (autocast caches the casts of leaf tensors
that require grad, `autocast_mode.cpp`; a frozen weight is cast again at each use).

Under LoRA only the adapters train (`shape.adapters`, what PEFT makes): DeepSpeed's
estimators are given their count (its optimizer partitions only parameters that require
grad, `stage3.py` and `stage_1_and_2.py`), and the frozen base weights come beside them as
"frozen weights": in the training dtype (DeepSpeed casts the whole module), partitioned
over the ranks under ZeRO-3 (zero.Init partitions every parameter) and whole on each rank
under ZeRO-1/2; without DeepSpeed, in the training dtype too (the worker casts them,
`train/lora.py`'s `keep_frozen_in`), beside fp32 adapters.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from llm_pipeline.fit.estimates import activation_bytes
from llm_pipeline.fit.memory import DTYPE_BYTES, Breakdown, DeviceKind, Lengths, runtime_bytes
from llm_pipeline.fit.shapes import ModelShape

#: DeepSpeed's own safety margin on host memory (its estimators' default).
ADDITIONAL_BUFFER_FACTOR = 1.5
#: DeepSpeed's default for stage3_max_live_parameters when a user's config leaves it out.
DEEPSPEED_MAX_LIVE_DEFAULT = 1_000_000_000


@dataclass(frozen=True)
class ZeroPlan:
    """The DeepSpeed settings that decide where model states live."""

    stage: int
    offload_optimizer: str = "none"
    offload_param: str = "none"
    max_live_parameters: int = DEEPSPEED_MAX_LIVE_DEFAULT


@dataclass(frozen=True)
class States:
    """Per process on its device, and per node in host memory."""

    device: Breakdown
    host_per_node: float


def model_states(
    shape: ModelShape,
    *,
    dtype: str,
    zero: ZeroPlan | None,
    processes_per_node: int,
    nodes: int,
    freeze_encoder: bool = False,
    on_cpu: bool = False,
) -> States:
    """Model states of one training process, and the host memory DeepSpeed wants per node.

    `on_cpu`: the "device" is host memory, so offloading moves nothing (DeepSpeed's CPU
    accelerator): the states are counted as without offload.
    """
    if zero is None:
        return _plain(
            shape, dtype=dtype, processes=processes_per_node, nodes=nodes, freeze=freeze_encoder
        )
    if on_cpu:
        zero = ZeroPlan(zero.stage, max_live_parameters=zero.max_live_parameters)
    p, ranks = shape.parameters, processes_per_node * nodes
    s = DTYPE_BYTES[dtype]
    wide = s == 4  # fp32: DeepSpeed's 16-bit terms take 4 bytes
    optimizer_off = zero.offload_optimizer != "none"
    adapters = shape.adapters
    trained = adapters.parameters if adapters else p  # the base's when every weight trains
    frozen = p if adapters else 0
    # Loading: with zero.Init each process holds its largest layer whole while it is made.
    loading = shape.largest_layer_parameters * 4 * processes_per_node * ADDITIONAL_BUFFER_FACTOR
    parts: list[tuple[str, float]]
    if zero.stage == 3:
        params_off = zero.offload_param != "none"
        host, device, largest = _zero3(
            total_params=trained,
            largest_layer_params=adapters.largest if adapters else shape.largest_layer_parameters,
            num_gpus_per_node=processes_per_node,
            num_nodes=nodes,
            cpu_offload=optimizer_off,
            cpu_offload_params=params_off,
            zero_init=True,
            additional_buffer_factor=ADDITIONAL_BUFFER_FACTOR,
        )
        sixteen_bit = largest + (0 if params_off else 2 * trained / ranks)
        # Gathered: what the coordinator may keep live, plus what stays whole on every rank
        # beside it (LoRA's adapters: the persistence threshold is the largest adapter, and
        # persistent parameters are not counted against stage3_max_live_parameters).
        persistent = trained if adapters else 0
        live = min(p + persistent, zero.max_live_parameters + persistent) * s
        parts = [("states", float(device)), ("fp32 copies", sixteen_bit if wide else 0.0)]
        if adapters:
            parts.append(("frozen weights", 0.0 if params_off else s * frozen / ranks))
            host = int(max(host, loading) + (s * frozen / nodes if params_off else 0))
        parts.append(("gathered", float(live)))
    else:
        host, device = _zero2(
            total_params=trained,
            num_gpus_per_node=processes_per_node,
            num_nodes=nodes,
            cpu_offload=optimizer_off,
            additional_buffer_factor=ADDITIONAL_BUFFER_FACTOR,
        )
        sixteen_bit = 2 * trained + (0 if optimizer_off else 2 * trained / ranks)
        parts = [("states", float(device)), ("fp32 copies", sixteen_bit if wide else 0.0)]
        if adapters:
            parts.append(("frozen weights", float(s * frozen)))
            # Without zero.Init every process loads the whole model on the host first.
            host = int(max(host, p * 4 * processes_per_node * ADDITIONAL_BUFFER_FACTOR))
        if zero.stage == 1:
            parts.append(("gradients", s * trained * (ranks - 1) / ranks))
    return States(Breakdown(tuple(parts)), float(host))


def _plain(shape: ModelShape, *, dtype: str, processes: int, nodes: int, freeze: bool) -> States:
    """The HF Trainer without DeepSpeed: fp32 weights, gradients and AdamW; with several
    processes, DDP's gradient buckets (a second copy of the gradients, which the Trainer does
    not make views of the buckets). Under LoRA the frozen base is in the training dtype and
    the adapters, which train, are fp32."""
    p = shape.parameters
    if shape.adapters is not None:
        trained = shape.adapters.parameters
        weights = DTYPE_BYTES[dtype] * p + 4.0 * trained
        p += trained  # loaded beside the base in fp32
    else:
        trained = p - (shape.encoder_parameters if freeze else 0)
        weights = 4.0 * p
    parts = [("weights", weights), ("gradients", 4.0 * trained), ("optimizer", 8.0 * trained)]
    if processes * nodes > 1:
        parts.append(("DDP buckets", 4.0 * trained))
    if DTYPE_BYTES[dtype] == 2:
        parts.append(("autocast copy", 2.0 * trained))
    # Each process loads the fp32 model on the host (and casts it there) before moving it to
    # its GPU.
    return States(Breakdown(tuple(parts)), float(4 * p * processes))


def _zero3(**kwargs: object) -> tuple[int, int, int]:
    with _deepspeed_import():
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    result: tuple[int, int, int] = estimate_zero3_model_states_mem_needs(**kwargs)
    return result


def _zero2(**kwargs: object) -> tuple[int, int]:
    with _deepspeed_import():
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    result: tuple[int, int] = estimate_zero2_model_states_mem_needs(**kwargs)
    return result


@contextlib.contextmanager
def _deepspeed_import() -> Iterator[None]:
    """Import DeepSpeed without its accelerator guess, which it prints to stdout.

    With no accelerator named, DeepSpeed detects one and logs "Setting accelerator to
    CPU" on stdout, into `--check-fit`'s table. Naming the one it would pick (cuda when torch
    sees a GPU, else cpu) for the import only changes nothing else; the variable is put
    back so that processes started later detect for themselves.
    """
    if "DS_ACCELERATOR" in os.environ:
        yield
        return
    import torch

    os.environ["DS_ACCELERATOR"] = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        yield
    finally:
        os.environ.pop("DS_ACCELERATOR", None)


def training_memory(
    shape: ModelShape,
    *,
    lengths: Lengths,
    dtype: str,
    device: DeviceKind,
    checkpointing: bool,
    zero: ZeroPlan | None,
    processes_per_node: int,
    nodes: int,
    freeze_encoder: bool = False,
) -> tuple[Breakdown, float]:
    """Peak memory of one training process on its device (RSS on CPU), by part, and the
    host memory DeepSpeed's estimator wants per node besides the processes themselves."""
    states = model_states(
        shape,
        dtype=dtype,
        zero=zero,
        processes_per_node=processes_per_node,
        nodes=nodes,
        freeze_encoder=freeze_encoder,
        on_cpu=device == "cpu",
    )
    activations = activation_bytes(
        shape, lengths, dtype=dtype, device=device, checkpointing=checkpointing
    )
    parts = (
        *states.device.parts,
        ("activations", activations),
        ("runtime", runtime_bytes(device, "train")),
    )
    return Breakdown(parts), states.host_per_node
