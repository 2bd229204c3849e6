"""The fit check: each place a config runs a model, its estimate against its machine.

`check_fit` returns every row of the table; `enforce` refuses a report with problems as a
ConfigError (exit 2), each problem naming the setting, what it needs, and the largest
value that fits or what else would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from llm_pipeline.config import ConfigError, PipelineConfig
from llm_pipeline.fit.estimates import (
    CUDA_HOST_RUNTIME_GIB,
    DTYPE_BYTES,
    GIB,
    Breakdown,
    Lengths,
    generation_memory,
    runtime_bytes,
)
from llm_pipeline.fit.machines import UnknownMachine
from llm_pipeline.fit.places import (
    Target,
    Where,
    evaluation_where,
    serving_where,
    source_tokens,
    target_tokens,
    training_where,
)
from llm_pipeline.fit.serving import server_batch, serving_alternative
from llm_pipeline.fit.shapes import ModelShape, ShapeUnavailable, model_shape
from llm_pipeline.fit.states import ZeroPlan, training_memory
from llm_pipeline.fit.training import training_advice, zero_plan

#: The flag that runs a config the check refuses; every refusal names it.
SKIP_FLAG = "--skip-fit-check"


@dataclass(frozen=True)
class Row:
    """One line of the table: a place's memory of one kind against what its machine has."""

    place: str  # finetune, evaluate, serve
    machine: str
    memory: str  # "GPU", "host"
    capacity_gib: float
    estimate: Breakdown
    settings: str  # what was estimated, in words
    problem: str | None = None

    @property
    def headroom_gib(self) -> float:
        return self.capacity_gib - self.estimate.total / GIB


@dataclass
class FitReport:
    """The table's rows, places the check could not estimate, and what does not fit."""

    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how a figure was had, for the table
    skipped: list[str] = field(default_factory=list)  # what could not be checked, and why
    other_problems: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [*self.other_problems, *(row.problem for row in self.rows if row.problem)]


def check_fit(config: PipelineConfig, *, target: Target) -> FitReport:
    """Estimate every place of `config` against its machine (`target`: where it runs)."""
    report = FitReport()
    try:
        shape = model_shape(config.model)
    except ShapeUnavailable as exc:
        report.skipped.append(f"fit check skipped (the model's shape is unknown): {exc}")
        return report
    if shape.source_note:
        report.notes.append(shape.source_note)
    for place, rows_of in (("finetune", _training), ("evaluate", _evaluation), ("serve", _serving)):
        try:
            if place == "finetune":
                report.other_problems += _precision_problems(config, target)
            report.rows += rows_of(config, shape, target)
        except UnknownMachine as exc:
            report.other_problems.append(
                f"{exc} (the fit check cannot estimate {place}; machine types it knows: "
                "fit/machines.py)"
            )
    return report


def enforce(report: FitReport) -> None:
    """Raise ConfigError (exit 2) listing every problem, with the way past a wrong estimate."""
    if report.problems:
        raise ConfigError(
            report.problems,
            source=f"the fit check (if its estimate is wrong for your setup, {SKIP_FLAG} "
            "runs the config anyway)",
        )


def _count(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 'es' if word.endswith('s') else 's'}"


def _gib(value: float) -> str:
    return f"~{value / GIB:.1f} GiB"


def _memory_label(where: Where) -> str:
    place = where.place
    if place.accelerator is not None:
        return f"per {place.accelerator.label}"
    return f"of host RAM on {place.machine} ({place.host_gib:.4g} GiB)"


#: The setting that picks each place's machine, for messages.
MACHINE_KEYS = {"finetune": "cluster.machine_type", "evaluate": "cluster.machine_type"}


def _host_row(place: str, where: Where, estimate: Breakdown, settings: str, key: str) -> Row:
    capacity = where.place.host_gib
    per = " per node" if where.nodes > 1 else ""
    problem = None
    if estimate.total / GIB > capacity:
        problem = (
            f"{key} {where.place.machine} has {capacity:.4g} GiB of host RAM; {place} needs "
            f"{_gib(estimate.total)}{per} ({estimate.describe()}; {settings})"
        )
    return Row(place, where.place.label, "host", capacity, estimate, settings, problem)


def _largest(fits: Callable[[int], bool], below: int) -> int:
    """The largest n in [1, below) with fits(n), 0 when none (fits grows false with n)."""
    low, high = 0, below
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


# --- training --------------------------------------------------------------------------


def _training(config: PipelineConfig, shape: ModelShape, target: Target) -> list[Row]:
    where = training_where(config, target)
    train = config.train
    zero, zero_note = zero_plan(config)
    lengths = Lengths(train.per_device_batch_size, source_tokens(config), target_tokens(config))

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
        f"{where.dtype}, micro-batch {lengths.batch} × ({lengths.source} + {lengths.target}) "
        f"tokens, {'gradient checkpointing, ' if train.gradient_checkpointing else ''}"
        f"{_zero_words(zero)}, {_count(where.processes, 'process')} per node × "
        f"{_count(where.nodes, 'node')}" + (f"; {zero_note}" if zero_note else "")
    )
    rows = []
    if where.device == "cuda":
        accelerator = where.place.accelerator
        assert accelerator is not None
        capacity = accelerator.memory_gib
        problem = None
        if per_process.total / GIB > capacity:
            advice = training_advice(
                estimate, lengths, capacity * GIB, zero=zero, config=config, nodes=where.nodes
            )
            problem = (
                f"train.per_device_batch_size {lengths.batch} needs {_gib(per_process.total)} "
                f"{_memory_label(where)} ({per_process.describe()}); {advice}"
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
        rows.append(_host_row("finetune", where, host, settings, _key("finetune", where)))
    else:
        node = Breakdown(tuple((n, v * where.processes) for n, v in per_process.parts))
        row = _host_row("finetune", where, node, settings, _key("finetune", where))
        if row.problem:
            per_gib = where.place.host_gib * GIB / where.processes
            advice = training_advice(
                estimate, lengths, per_gib, zero=zero, config=config, nodes=where.nodes
            )
            row = replace(
                row,
                problem=f"train.per_device_batch_size {lengths.batch} with "
                f"{_count(where.processes, 'process')} needs {_gib(node.total)} "
                f"{_memory_label(where)} ({node.describe()}); {advice}",
            )
        rows.append(replace(row, machine=_nodes_label(where)))
    return rows


def _key(place: str, where: Where) -> str:
    """The setting that chose this machine (this computer's memory has none)."""
    if where.place.machine == "this machine":
        return "this machine:"
    return MACHINE_KEYS.get(place, "deploy.machine_type")


def _precision_problems(config: PipelineConfig, target: Target) -> list[str]:
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


# --- evaluation and serving ------------------------------------------------------------


def _generation_rows(
    place: str,
    where: Where,
    shape: ModelShape,
    *,
    batch: int,
    beams: int,
    source: int,
    new_tokens: int,
    settings: str,
    refusal: Callable[[Breakdown, int], str],
) -> list[Row]:
    """The GPU row (per process) and the host row, or the host row alone on a CPU."""

    def estimate(batch: int) -> Breakdown:
        return generation_memory(
            shape,
            batch=batch,
            beams=beams,
            source=source,
            new_tokens=new_tokens,
            dtype=where.dtype,
            device=where.device,
        )

    per_process = estimate(batch)
    if where.device == "cuda":
        accelerator = where.place.accelerator
        assert accelerator is not None
        capacity = accelerator.memory_gib * GIB
        problem = None
        if per_process.total > capacity:
            largest = _largest(lambda b: estimate(b).total <= capacity, batch)
            problem = refusal(per_process, largest)
        gpu = Row(
            place, where.place.label, "GPU", accelerator.memory_gib, per_process, settings, problem
        )
        weights = shape.parameters * DTYPE_BYTES[where.dtype]
        host = Breakdown(
            (
                ("runtime", where.processes * CUDA_HOST_RUNTIME_GIB * GIB),
                ("weights while loading", float(where.processes * weights)),
            )
        )
        return [gpu, _host_row(place, where, host, settings, _key(place, where))]
    total = Breakdown(tuple((n, v * where.processes) for n, v in per_process.parts))
    row = _host_row(place, where, total, settings, _key(place, where))
    if row.problem:
        capacity = where.place.host_gib * GIB / where.processes
        largest = _largest(lambda b: estimate(b).total <= capacity, batch)
        row = replace(row, problem=refusal(total, largest))
    return [row]


def _evaluation(config: PipelineConfig, shape: ModelShape, target: Target) -> list[Row]:
    where = evaluation_where(config, target)
    evaluate = config.evaluate
    beams = evaluate.num_beams or shape.default_num_beams
    new_tokens = evaluate.max_new_tokens or shape.default_max_length
    source = source_tokens(config)
    settings = (
        f"{where.dtype}, batch {evaluate.batch_size} × {beams} beam(s), {source} source + "
        f"{new_tokens} new tokens, {_count(where.processes, 'process')}"
    )

    def refusal(needs: Breakdown, largest: int) -> str:
        what = f"evaluate.batch_size {evaluate.batch_size} × num_beams {beams}"
        fix = (
            f"at most {largest} fits"
            if largest
            else "even a batch of 1 does not fit: the "
            "weights need a GPU with more memory (cluster.machine_type / accelerator_type)"
        )
        return (
            f"{what} needs {_gib(needs.total)} {_memory_label(where)} ({needs.describe()}); {fix}"
        )

    return _generation_rows(
        "evaluate",
        where,
        shape,
        batch=evaluate.batch_size,
        beams=beams,
        source=source,
        new_tokens=new_tokens,
        settings=settings,
        refusal=refusal,
    )


def _serving(config: PipelineConfig, shape: ModelShape, target: Target) -> list[Row]:
    where = serving_where(config, target)
    limits = server_batch(config)
    settings = (
        f"{where.dtype}, the server's largest batch: {limits.batch} instances × "
        f"{limits.beams} beams, {limits.source} source + {limits.new_tokens} new tokens"
    )
    deploy = config.deploy

    def refusal(needs: Breakdown, largest: int) -> str:
        accelerator = where.place.accelerator
        if accelerator is None:
            what = f"deploy.machine_type {where.place.machine}"
        else:
            what = (
                f"deploy.accelerator_type {deploy.accelerator_type} on deploy.machine_type "
                f"{deploy.machine_type}"
            )
            if not accelerator.has_bf16:
                what += f" ({accelerator.label} has no bf16: the server runs fp32)"
        text = (
            f"{what}: serving needs {_gib(needs.total)} {_memory_label(where)} "
            f"({needs.describe()}; {settings})"
        )
        if largest:
            text += (
                f"; at most {largest} instances per batch fit (the server's "
                f"{limits.batch_variable} is {limits.batch})"
            )
        alternative = serving_alternative(shape, limits)
        if alternative:
            text += f"; a machine that holds it: {alternative}"
        return text

    return _generation_rows(
        "serve",
        where,
        shape,
        batch=limits.batch,
        beams=limits.beams,
        source=limits.source,
        new_tokens=limits.new_tokens,
        settings=settings,
        refusal=refusal,
    )


__all__ = ["SKIP_FLAG", "FitReport", "Row", "check_fit", "enforce", "runtime_bytes"]
