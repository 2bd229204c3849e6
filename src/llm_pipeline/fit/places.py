"""Where a config runs a model, on what, and in which dtype: training, evaluation, serving.

The answers mirror the run: on Vertex, finetune runs on `cluster` (node_count machines,
one process per GPU), evaluate on one node of the same machine type (one process per GPU;
a plain pipeline step on Vertex's default machine when the cluster has no GPU), and the
endpoint on `deploy`'s machine. A local run does all three on this computer: on the GPUs
torch sees (one process per GPU, the server on the first), else on its CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llm_pipeline.config import PipelineConfig
from llm_pipeline.fit.machines import (
    MACHINE_TYPES,
    PIPELINE_STEP_MACHINE,
    Place,
    no_gpu_reason,
    this_machine,
    vertex_place,
)
from llm_pipeline.fit.memory import DeviceKind, Lengths
from llm_pipeline.fit.shapes import ModelShape
from llm_pipeline.tasks import get_task

Target = Literal["local", "vertex"]

#: Longest source (or causal LM sequence, or text) read when data.max_source_length
#: (max_length) is unset (the tokenizer's limit, at most this: data/preprocess and the server
#: cap it alike).
DEFAULT_SOURCE_CAP = 1024


@dataclass(frozen=True)
class Where:
    """One place: its machine, the device a process computes on, processes per machine,
    machines, and the dtype its model is in."""

    place: Place
    device: DeviceKind
    processes: int
    nodes: int
    dtype: str


def auto_dtype(place: Place) -> str:
    """What evaluation, serving and `train.precision: auto` pick: bf16 on GPUs with native
    bf16 (compute capability 8.0 and up), fp32 on older GPUs and on CPU."""
    return "bf16" if place.accelerator is not None and place.accelerator.has_bf16 else "fp32"


def _device(place: Place) -> DeviceKind:
    return "cuda" if place.accelerator is not None else "cpu"


def training_where(config: PipelineConfig, target: Target) -> Where:
    """Finetune's machines. Raises machines.UnknownMachine."""
    cluster = config.cluster
    if target == "local":
        place = this_machine()
    else:
        place = vertex_place(
            cluster.machine_type,
            cluster.accelerator_type,
            cluster.accelerator_count,
            key="cluster",
        )
    processes = cluster.processes or max(place.gpus, 1)
    precision = config.train.precision
    dtype = auto_dtype(place) if precision == "auto" else precision
    nodes = cluster.node_count if target == "vertex" else 1
    return Where(place, _device(place), processes, nodes, dtype)


def evaluation_where(config: PipelineConfig, target: Target) -> Where:
    """Evaluate's machine: one training node with its GPUs, else a CPU."""
    if target == "local":
        place = this_machine()
    elif config.cluster.accelerator_type:
        place = training_where(config, target).place
    else:
        step = MACHINE_TYPES[PIPELINE_STEP_MACHINE]
        place = Place(f"{step.name} (pipeline step)", step.memory_gib)
    processes = config.evaluate.processes or max(place.gpus, 1)
    return Where(place, _device(place), processes, 1, auto_dtype(place))


def serving_where(config: PipelineConfig, target: Target) -> Where:
    """The endpoint's machine: `deploy`'s on Vertex, else where the deploy step serves."""
    deploy = config.deploy
    if deploy.target == "vertex":
        place = vertex_place(
            deploy.machine_type, deploy.accelerator_type, deploy.accelerator_count, key="deploy"
        )
    elif target == "local":
        place = this_machine()
    else:  # a Vertex run that serves from a local registry: inside the deploy step
        step = MACHINE_TYPES[PIPELINE_STEP_MACHINE]
        place = Place(f"{step.name} (pipeline step)", step.memory_gib)
    # The server computes on one device (cuda:0), whatever the replica has.
    return Where(place, _device(place), 1, 1, auto_dtype(place))


def local_gpu_problems(config: PipelineConfig, target: Target) -> list[str]:
    """What a local run cannot do with this machine's GPUs, said before it starts: fewer
    GPUs than `cluster.local_gpus` asks for, or more training or evaluation processes than
    GPUs (each process takes the GPU its local rank names, so an extra one finds none)."""
    if target != "local":
        return []
    place = this_machine()
    problems = []
    needed = config.cluster.local_gpus
    if place.gpus < needed:
        seen = f"{place.gpus} GPU(s)" if place.gpus else f"no GPU ({no_gpu_reason()})"
        problems.append(
            f"cluster.local_gpus {needed}: this config is meant for {needed} GPU(s) and torch "
            f"sees {seen} on this machine; run it on the CPU with --set cluster.local_gpus=0 "
            "(far slower: configs/local.json is the demo sized for a CPU)"
        )
    if place.gpus:
        for key, processes in (
            ("cluster.processes", config.cluster.processes),
            ("evaluate.processes", config.evaluate.processes),
        ):
            if processes is not None and processes > place.gpus:
                problems.append(
                    f"{key} {processes}: this machine has {place.gpus} GPU(s) and each "
                    f"process takes one: set it to {place.gpus} or less, or null for one per GPU"
                )
    return problems


def training_lengths(config: PipelineConfig, shape: ModelShape) -> Lengths:
    """One training micro-batch at its longest, its rows' tokens as the task has them
    (`Task.fit_lengths`: a document and its summary, one whole sequence, a text), each row
    as many sequences as the task runs per row (`Task.fit_sequences_per_row`)."""
    task = get_task(config.task)
    read, written = task.fit_lengths(config, shape)
    return Lengths(config.train.per_device_batch_size, read, written, task.fit_sequences_per_row)


def input_tokens(config: PipelineConfig, shape: ModelShape) -> int:
    """Tokens a model reads per row in evaluation: what a training row reads (a document, a
    prompt within its whole sequence, a text)."""
    read, _ = get_task(config.task).fit_lengths(config, shape)
    return read
