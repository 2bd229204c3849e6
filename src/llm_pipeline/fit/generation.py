"""Evaluate's and serve's rows: weights plus the generation cache (a classifier's: one
forward pass, nothing generated), per GPU and per host; an evaluation that also scores whole
sequences (DPO's pairs) needs the larger of that and its scoring pass."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from llm_pipeline.config import PipelineConfig
from llm_pipeline.fit.estimates import generation_memory, scoring_memory
from llm_pipeline.fit.machines import THIS_MACHINE
from llm_pipeline.fit.memory import CUDA_HOST_RUNTIME_GIB, DTYPE_BYTES, GIB, Breakdown
from llm_pipeline.fit.places import Target, Where, evaluation_where, input_tokens, serving_where
from llm_pipeline.fit.rows import Row, count, gib, host_row, largest, machine_key, memory_label
from llm_pipeline.fit.serving import (
    EngineMemory,
    endpoint_has_gpu,
    server_batch,
    serving_alternative,
    serving_engine,
)
from llm_pipeline.fit.shapes import ModelShape
from llm_pipeline.tasks import get_task


def generation_rows(
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
    scored: int = 0,
    engine: EngineMemory | None = None,
    engine_beside: bool = False,
) -> list[Row]:
    """The GPU row (per process) and the host row, or the host row alone on a CPU; with
    `scored` sequences per row also scored whole (of `source` tokens), the larger peak.
    `engine`: the one that generates (its weights and activations in place of
    transformers'); with `engine_beside`, transformers' model is loaded too (the evaluate
    step generates with the engine and scores with transformers): on a GPU its weights
    leave for the host while the engine generates (`evaluation.sharded`), so the peak is
    the larger of the two; on a CPU both are in memory together."""
    converted = engine if engine is not None and engine.weight_bytes is not None else None

    def generating_with(batch: int, chosen: EngineMemory | None) -> Breakdown:
        return generation_memory(
            shape,
            batch=batch,
            beams=beams,
            source=source,
            new_tokens=new_tokens,
            dtype=chosen.dtype if chosen is not None and chosen.dtype else where.dtype,
            device=where.device,
            weight_bytes=chosen.weight_bytes if chosen is not None else None,
        )

    def estimate(batch: int) -> Breakdown:
        if converted is None:
            generating = generating_with(batch, None)
        elif not engine_beside:
            generating = generating_with(batch, converted)
        elif where.device == "cuda":
            # The engine's weights in its precision, its cache and work counted as
            # transformers' in the evaluation's dtype (CTranslate2 keeps less: uncalibrated).
            weights_only = replace(converted, dtype=None)
            generating = max(
                generating_with(batch, None),
                generating_with(batch, weights_only),
                key=lambda needs: needs.total,
            )
        else:
            assert converted.weight_bytes is not None
            form = ("engine weights", float(shape.parameters * converted.weight_bytes))
            generating = Breakdown((*generating_with(batch, None).parts, form))
        if not scored:
            return generating
        scoring = scoring_memory(
            shape, sequences=batch * scored, tokens=source, dtype=where.dtype, device=where.device
        )
        return max(generating, scoring, key=lambda needs: needs.total)

    per_process = estimate(batch)
    if where.device == "cuda":
        accelerator = where.place.accelerator
        assert accelerator is not None
        capacity = accelerator.memory_gib * GIB
        problem = None
        if per_process.total > capacity:
            most = largest(lambda b: estimate(b).total <= capacity, batch)
            problem = refusal(per_process, most)
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
        return [gpu, host_row(place, where, host, settings, machine_key(place, where))]
    total = Breakdown(tuple((n, v * where.processes) for n, v in per_process.parts))
    row = host_row(place, where, total, settings, machine_key(place, where))
    if row.problem:
        capacity = where.place.host_gib * GIB / where.processes
        most = largest(lambda b: estimate(b).total <= capacity, batch)
        row = replace(row, problem=refusal(total, most))
    return [row]


def evaluation_rows(config: PipelineConfig, shape: ModelShape, target: Target) -> list[Row]:
    """Evaluate's rows: `evaluate.batch_size × num_beams` at the configured lengths (a
    classifier's: `evaluate.batch_size` texts, forward only)."""
    where = evaluation_where(config, target)
    evaluate = config.evaluate
    source = input_tokens(config, shape)
    processes = count(where.processes, "process")
    scored = get_task(config.task).fit_scored_sequences_per_row if shape.kind.generates else 0
    if not shape.kind.generates:
        beams, new_tokens = 1, 0
        settings = (
            f"{where.dtype}, batch {evaluate.batch_size} × {source} tokens, forward only, "
            f"{processes}"
        )
        what = f"evaluate.batch_size {evaluate.batch_size}"
    else:
        beams = evaluate.num_beams or shape.default_num_beams
        new_tokens = evaluate.max_new_tokens or shape.default_max_length
        settings = (
            f"{where.dtype}, batch {evaluate.batch_size} × {beams} beam(s), {source} "
            f"{_input_word(shape)} + {new_tokens} new tokens"
            + (f", {scored} × {evaluate.batch_size} sequences scored whole" if scored else "")
            + f", {processes}"
        )
        what = f"evaluate.batch_size {evaluate.batch_size} × num_beams {beams}"

    # The evaluate step generates with the endpoint's engine, beside transformers' model.
    served = (
        serving_where(config, target).place.accelerator
        if config.deploy.target != "vertex"
        else None
    )
    engine = serving_engine(
        config,
        shape,
        gpu=endpoint_has_gpu(config, target),
        gpu_bf16=served.has_bf16 if served is not None else None,
    )
    wider = engine.weight_bytes is not None and engine.weight_bytes > DTYPE_BYTES[where.dtype]

    def refusal(needs: Breakdown, most: int) -> str:
        fix = (
            f"at most {most} fits"
            if most
            else "even a batch of 1 does not fit: the weights need a GPU with more memory"
            + (
                ""
                if where.place.machine == THIS_MACHINE
                else " (cluster.machine_type / accelerator_type)"
            )
        )
        if wider:  # the endpoint's precision, which the evaluation generates in too
            fix += (
                f"; it generates as the endpoint will, in {engine.choice.describe()} "
                "(deploy.engine_compute_type, or the serving GPU, sets that)"
            )
        return f"{what} needs {gib(needs.total)} {memory_label(where)} ({needs.describe()}); {fix}"

    if engine.weight_bytes is not None:
        settings += f", generating with {engine.choice.describe()}"
    return generation_rows(
        "evaluate",
        where,
        shape,
        batch=evaluate.batch_size,
        beams=beams,
        source=source,
        new_tokens=new_tokens,
        settings=settings,
        refusal=refusal,
        scored=scored,
        engine=engine,
        engine_beside=True,
    )


def serving_rows(config: PipelineConfig, shape: ModelShape, target: Target) -> list[Row]:
    """The endpoint's rows: the server's largest batch on `deploy`'s machine."""
    where = serving_where(config, target)
    limits = server_batch(config, shape)
    accelerator = where.place.accelerator
    engine = serving_engine(
        config,
        shape,
        gpu=where.device == "cuda",
        gpu_bf16=accelerator.has_bf16 if accelerator is not None else None,
    )
    if not shape.kind.generates:
        settings = (
            f"{where.dtype}, the server's largest batch: {limits.batch} instances × "
            f"{limits.source} tokens, forward only"
        )
    else:
        settings = (
            f"{engine.label or where.dtype + ', '}the server's largest batch: {limits.batch} "
            "instances × "
            f"{count(limits.beams, 'beam')}, {limits.source} {_input_word(shape)} + "
            f"{limits.new_tokens} new tokens"
        )
    deploy = config.deploy

    def refusal(needs: Breakdown, most: int) -> str:
        accelerator = where.place.accelerator
        if where.place.machine == THIS_MACHINE:
            what = where.place.label  # the local server's machine: no deploy.* chose it
        elif accelerator is None:
            what = f"deploy.machine_type {where.place.machine}"
        else:
            what = (
                f"deploy.accelerator_type {deploy.accelerator_type} on deploy.machine_type "
                f"{deploy.machine_type}"
            )
        if accelerator is not None and not accelerator.has_bf16:
            what += f" ({accelerator.label} has no bf16: the server runs fp32)"
        text = (
            f"{what}: serving needs {gib(needs.total)} {memory_label(where)} "
            f"({needs.describe()}; {settings})"
        )
        if most:
            text += (
                f"; at most {most} instances per batch fit (the server's "
                f"{limits.batch_variable} is {limits.batch})"
            )
        alternative = serving_alternative(shape, limits)
        if alternative:
            text += f"; a machine that holds it: {alternative}"
        return text

    return generation_rows(
        "serve",
        where,
        shape,
        batch=limits.batch,
        beams=limits.beams,
        source=limits.source,
        new_tokens=limits.new_tokens,
        settings=settings,
        refusal=refusal,
        engine=engine,
    )


def _input_word(shape: ModelShape) -> str:
    """What a model generates from: a seq2seq model's source, a causal LM's prompt."""
    return "source" if shape.kind.encoder_decoder else "prompt"
