"""Finetune's rows: the DeepSpeed plan as the finetune step runs it, its estimate per GPU and
per node, and what would fit when it does not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from llm_pipeline.config import PipelineConfig
from llm_pipeline.config.train import AUTO
from llm_pipeline.fit.memory import CUDA_HOST_RUNTIME_GIB, GIB, Breakdown, Lengths
from llm_pipeline.fit.places import Target, Where, training_lengths, training_where
from llm_pipeline.fit.rows import Row, count, gib, host_row, largest, machine_key, memory_label
from llm_pipeline.fit.shapes import ModelShape
from llm_pipeline.fit.stage import StageChoice, choose_stage
from llm_pipeline.fit.states import DEEPSPEED_MAX_LIVE_DEFAULT, ZeroPlan, training_memory
from llm_pipeline.train.zero_stage import configured_stage

#: The most nodes the advice looks at.
MAX_NODES = 64

Estimator = Callable[..., tuple[Breakdown, float]]


def stage_choice(
    config: PipelineConfig, shape: ModelShape, target: Target
) -> tuple[StageChoice, str | None]:
    """The plan finetune runs under: the config's, or what `auto` picks for its machines
    (the finetune job picks again where it runs, from the same estimate); and the note of
    `configured_stage`."""
    fixed, note = configured_stage(config.train)
    if fixed is not None:
        return fixed, note
    train = config.train
    choice = choose_stage(
        shape,
        training_where(config, target),
        training_lengths(config, shape),
        checkpointing=train.gradient_checkpointing,
        freeze_encoder=train.freeze_encoder,
        offload_optimizer=train.offload_optimizer,
        offload_param=train.offload_param,
    )
    return choice, note


def training_advice(
    estimate: Estimator,
    lengths: Lengths,
    capacity: float,
    *,
    zero: ZeroPlan | None,
    config: PipelineConfig,
    nodes: int,
    more_nodes: bool = True,
) -> str:
    """What fits `capacity` bytes per process: the largest micro-batch, then each other
    change that fits at the configured micro-batch (checkpointing, offload, ZeRO-3, and
    with `more_nodes` (a Vertex run; a local one has this machine alone) more nodes). A
    `zero_stage: "auto"` config is not told of ZeRO-3 or offload: auto tried them."""

    def fits(lengths: Lengths = lengths, **change: object) -> float | None:
        total = estimate(lengths, **change)[0].total
        return total if total <= capacity else None

    low = largest(lambda batch: fits(replace(lengths, batch=batch)) is not None, lengths.batch)
    parts = [f"at most {low} fits" if low else "even train.per_device_batch_size 1 does not fit"]
    options = []
    if not config.train.gradient_checkpointing and (total := fits(checkpointing=True)):
        options.append(f"train.gradient_checkpointing true (~{total / GIB:.1f} GiB)")
    auto = config.train.zero_stage == AUTO and config.train.deepspeed_config is None
    if zero is not None and zero.stage < 3 and not auto:
        stage3 = ZeroPlan(3, zero.offload_optimizer, "none", DEEPSPEED_MAX_LIVE_DEFAULT)
        if total := fits(zero=stage3):
            options.append(f"train.zero_stage 3 (~{total / GIB:.1f} GiB)")
    if (
        zero is not None
        and not auto
        and zero.stage == 3
        and "none" in (zero.offload_optimizer, zero.offload_param)
    ):
        offloaded = replace(zero, offload_optimizer="cpu", offload_param="cpu")
        if total := fits(zero=offloaded):
            options.append(
                f"train.offload_optimizer and train.offload_param cpu (~{total / GIB:.1f} GiB)"
            )
    if zero is not None and more_nodes:
        for more in range(nodes + 1, MAX_NODES + 1):
            if total := fits(nodes=more):
                options.append(f"cluster.node_count {more} (~{total / GIB:.1f} GiB)")
                break
    if options:
        parts.append("or at this micro-batch: " + "; ".join(options))
    return "; ".join(parts)


def training_rows(
    config: PipelineConfig,
    shape: ModelShape,
    target: Target,
    choice: tuple[StageChoice, str | None] | None = None,
) -> list[Row]:
    """Finetune's rows: per GPU and per node's host memory (or host memory alone on CPUs),
    under `choice` (`stage_choice`'s, computed when not given)."""
    where = training_where(config, target)
    train = config.train
    stage, zero_note = choice or stage_choice(config, shape, target)
    zero = stage.plan
    lengths = training_lengths(config, shape)

    def estimate(lengths: Lengths, **change: object) -> tuple[Breakdown, float]:
        settings = {
            "checkpointing": train.gradient_checkpointing,
            "zero": zero,
            "nodes": where.nodes,
            **change,
        }
        return training_memory(
            shape,
            lengths=lengths,
            dtype=where.dtype,
            device=where.device,
            checkpointing=bool(settings["checkpointing"]),
            zero=settings["zero"],  # type: ignore[arg-type]
            processes_per_node=where.processes,
            nodes=int(settings["nodes"]),  # type: ignore[call-overload]
            freeze_encoder=train.freeze_encoder,
        )

    per_process, deepspeed_host = estimate(lengths)
    settings = (
        f"{where.dtype}, micro-batch {_batch_words(lengths)} × {_tokens_words(shape, lengths)} "
        "tokens, "
        f"{_lora_words(shape)}{'gradient checkpointing, ' if train.gradient_checkpointing else ''}"
        f"{_zero_words(zero)}, {count(where.processes, 'process')} per node × "
        f"{count(where.nodes, 'node')}" + (f"; {zero_note}" if zero_note else "")
    )
    rows = []
    if where.device == "cuda":
        accelerator = where.place.accelerator
        assert accelerator is not None
        capacity = accelerator.memory_gib
        problem = None
        if per_process.total / GIB > capacity:
            advice = training_advice(
                estimate,
                lengths,
                capacity * GIB,
                zero=zero,
                config=config,
                nodes=where.nodes,
                more_nodes=target == "vertex",
            )
            problem = (
                f"train.per_device_batch_size {lengths.batch} needs {gib(per_process.total)} "
                f"{memory_label(where)} ({per_process.describe()}); {advice}"
            )
        rows.append(
            Row("finetune", _nodes_label(where), "GPU", capacity, per_process, settings, problem)
        )
        host = Breakdown(
            (
                ("runtime", where.processes * CUDA_HOST_RUNTIME_GIB * GIB),
                ("DeepSpeed host estimate" if zero else "weights while loading", deepspeed_host),
            )
        )
        rows.append(host_row("finetune", where, host, settings, machine_key("finetune", where)))
    else:
        node = Breakdown(tuple((n, v * where.processes) for n, v in per_process.parts))
        row = host_row("finetune", where, node, settings, machine_key("finetune", where))
        if row.problem:
            per_gib = where.place.host_gib * GIB / where.processes
            advice = training_advice(
                estimate,
                lengths,
                per_gib,
                zero=zero,
                config=config,
                nodes=where.nodes,
                more_nodes=target == "vertex",
            )
            row = replace(
                row,
                problem=f"train.per_device_batch_size {lengths.batch} with "
                f"{count(where.processes, 'process')} needs {gib(node.total)} "
                f"{memory_label(where)} ({node.describe()}); {advice}",
            )
        rows.append(replace(row, machine=_nodes_label(where)))
    return rows


def precision_problems(config: PipelineConfig, target: Target) -> list[str]:
    """A train.precision the training machine cannot run (the finetune step would refuse it
    only once it starts, after the data is downloaded and tokenized)."""
    precision = config.train.precision
    accelerator = training_where(config, target).place.accelerator
    if precision == "bf16" and accelerator is not None and not accelerator.has_bf16:
        return [
            f"train.precision bf16: {accelerator.label} has no bf16 (compute capability "
            f"{accelerator.capability}; bf16 needs 8.0, e.g. A100, L4, H100): use auto "
            "(fp32 there) or fp32"
        ]
    if precision == "fp16" and accelerator is None:
        return ["train.precision fp16 needs a GPU: use fp32 or bf16 on the CPU"]
    return []


def _batch_words(lengths: Lengths) -> str:
    """`8`, or for a task that runs several sequences per row `4 rows × 2 sequences`."""
    if lengths.per_row == 1:
        return str(lengths.batch)
    return f"{count(lengths.batch, 'row')} × {lengths.per_row} sequences"


def _tokens_words(shape: ModelShape, lengths: Lengths) -> str:
    """`(512 + 128)` source and target tokens, or a causal LM's or a classifier's `512`."""
    if not shape.kind.encoder_decoder:
        return str(lengths.source)
    return f"({lengths.source} + {lengths.target})"


def _lora_words(shape: ModelShape) -> str:
    """`LoRA r 16 (40.0M of 6.78B parameters train), ` or nothing."""
    adapters = shape.adapters
    if adapters is None:
        return ""
    return (
        f"LoRA r {adapters.rank} ({_millions(adapters.parameters)} of "
        f"{_millions(shape.parameters + adapters.parameters)} parameters train), "
    )


def _millions(number: int) -> str:
    return f"{number / 1e9:.2f}B" if number >= 1e9 else f"{number / 1e6:.1f}M"


def _nodes_label(where: Where) -> str:
    return where.place.label + (f" × {where.nodes} nodes" if where.nodes > 1 else "")


def _zero_words(zero: ZeroPlan | None) -> str:
    if zero is None:
        return "no DeepSpeed"
    offload = [
        f"{what} → {device}"
        for what, device in (
            ("optimizer", zero.offload_optimizer),
            ("parameters", zero.offload_param),
        )
        if device != "none"
    ]
    return f"ZeRO-{zero.stage}" + (f" (offload {', '.join(offload)})" if offload else "")
