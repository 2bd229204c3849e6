"""The machines a config can name: Vertex AI machine types, their GPUs, and this computer
(its memory and the GPUs torch sees on it).

One table, from Google's published figures (Compute Engine "GPU machine types",
"Accelerator-optimized machine family" and "General-purpose machine family" pages). Google
writes both host memory and GPU memory in GB where a GB is 2**30 bytes, so the figures here
are GiB. A GPU's memory is what its card has; the CUDA context and the allocator take a part
of it, which the estimates count as runtime (`estimates.CUDA_RUNTIME_GIB`).

Compute capability decides the dtype the pipeline picks on its own (`auto`): bf16 from 8.0
(A100, L4, H100, H200), fp32 below (T4 7.5, V100 7.0, P100 6.0, P4 6.1), which emulate bf16
at a fraction of the speed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Compute capability from which `auto` picks bf16.
BF16_FROM_CAPABILITY = 8.0


@dataclass(frozen=True)
class Accelerator:
    """A GPU model as Vertex AI names it (`NVIDIA_TESLA_A100`) and what it holds."""

    name: str
    label: str  # for people: "A100 40GB"
    memory_gib: float
    capability: float

    @property
    def has_bf16(self) -> bool:
        """Native bf16 (compute capability 8.0 and up)."""
        return self.capability >= BF16_FROM_CAPABILITY


ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator("NVIDIA_TESLA_P4", "P4 8GB", 8, 6.1),
        Accelerator("NVIDIA_TESLA_P100", "P100 16GB", 16, 6.0),
        Accelerator("NVIDIA_TESLA_V100", "V100 16GB", 16, 7.0),
        Accelerator("NVIDIA_TESLA_T4", "T4 16GB", 16, 7.5),
        Accelerator("NVIDIA_L4", "L4 24GB", 24, 8.9),
        Accelerator("NVIDIA_TESLA_A100", "A100 40GB", 40, 8.0),
        Accelerator("NVIDIA_A100_80GB", "A100 80GB", 80, 8.0),
        Accelerator("NVIDIA_H100_80GB", "H100 80GB", 80, 9.0),
        Accelerator("NVIDIA_H100_MEGA_80GB", "H100 Mega 80GB", 80, 9.0),
        Accelerator("NVIDIA_H200_141GB", "H200 141GB", 141, 9.0),
    )
}


@dataclass(frozen=True)
class MachineType:
    """A Vertex machine type: host memory, and the GPUs it comes with (A2, A3, G2) or may
    take (N1: T4, V100, P100, P4, any count up to `max_gpus`)."""

    name: str
    memory_gib: float
    gpu: str | None = None  # built-in accelerator of accelerator-optimized machines
    gpu_count: int = 0
    attachable: tuple[str, ...] = ()


_N1_GPUS = ("NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_P4")


def _family(
    prefix: str, gib_per_vcpu: float, sizes: tuple[int, ...], attachable: tuple[str, ...] = ()
) -> list[MachineType]:
    return [
        MachineType(f"{prefix}-{vcpus}", vcpus * gib_per_vcpu, attachable=attachable)
        for vcpus in sizes
    ]


def _gpu_series(gpu: str, rows: tuple[tuple[str, float, int], ...]) -> list[MachineType]:
    return [MachineType(name, memory, gpu=gpu, gpu_count=count) for name, memory, count in rows]


_N1_SIZES = (2, 4, 8, 16, 32, 64, 96)
MACHINE_TYPES: dict[str, MachineType] = {
    m.name: m
    for m in (
        *_family("n1-standard", 3.75, (1, *_N1_SIZES), _N1_GPUS),
        *_family("n1-highmem", 6.5, _N1_SIZES, _N1_GPUS),
        *_family("n1-highcpu", 0.9, _N1_SIZES, _N1_GPUS),
        *_family("e2-standard", 4, (2, 4, 8, 16, 32)),
        *_family("e2-highmem", 8, (2, 4, 8, 16)),
        *_family("n2-standard", 4, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
        *_family("n2-highmem", 8, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
        *_gpu_series(
            "NVIDIA_TESLA_A100",
            (
                ("a2-highgpu-1g", 85, 1),
                ("a2-highgpu-2g", 170, 2),
                ("a2-highgpu-4g", 340, 4),
                ("a2-highgpu-8g", 680, 8),
                ("a2-megagpu-16g", 1360, 16),
            ),
        ),
        *_gpu_series(
            "NVIDIA_A100_80GB",
            (
                ("a2-ultragpu-1g", 170, 1),
                ("a2-ultragpu-2g", 340, 2),
                ("a2-ultragpu-4g", 680, 4),
                ("a2-ultragpu-8g", 1360, 8),
            ),
        ),
        *_gpu_series(
            "NVIDIA_H100_80GB",
            (
                ("a3-highgpu-1g", 234, 1),
                ("a3-highgpu-2g", 468, 2),
                ("a3-highgpu-4g", 936, 4),
                ("a3-highgpu-8g", 1872, 8),
            ),
        ),
        *_gpu_series("NVIDIA_H100_MEGA_80GB", (("a3-megagpu-8g", 1872, 8),)),
        *_gpu_series("NVIDIA_H200_141GB", (("a3-ultragpu-8g", 2952, 8),)),
        *_gpu_series(
            "NVIDIA_L4",
            (
                ("g2-standard-4", 16, 1),
                ("g2-standard-8", 32, 1),
                ("g2-standard-12", 48, 1),
                ("g2-standard-16", 64, 1),
                ("g2-standard-24", 96, 2),
                ("g2-standard-32", 128, 1),
                ("g2-standard-48", 192, 4),
                ("g2-standard-96", 384, 8),
            ),
        ),
    )
}

#: What a pipeline step with no resources of its own runs on in Vertex AI Pipelines
#: ("Specify the machine configuration for a pipeline step": e2-standard-4, 16 GB).
PIPELINE_STEP_MACHINE = "e2-standard-4"


@dataclass(frozen=True)
class Place:
    """Where one part of a run executes: a host (its memory) and its GPUs, if any."""

    machine: str  # machine type, or "this machine"
    host_gib: float
    accelerator: Accelerator | None = None
    gpus: int = 0

    @property
    def label(self) -> str:
        """`a2-megagpu-16g (16 × A100 40GB)`, `n1-standard-8`, `this machine`."""
        if self.accelerator is None:
            return self.machine
        return f"{self.machine} ({self.gpus} × {self.accelerator.label})"


class UnknownMachine(ValueError):
    """A machine or accelerator type missing from the table; the message says which."""


def vertex_place(
    machine_type: str, accelerator_type: str | None, accelerator_count: int, *, key: str
) -> Place:
    """The `Place` a Vertex worker pool or endpoint spec names; `key` (e.g. `cluster`) is
    the config section, for messages. Raises UnknownMachine for a type not in the table, or
    an accelerator the machine type cannot carry."""
    machine = MACHINE_TYPES.get(machine_type)
    if machine is None:
        raise UnknownMachine(
            f"{key}.machine_type {machine_type!r} is not in the fit check's table of Vertex "
            f"machine types{_close(machine_type, MACHINE_TYPES)}"
        )
    if not accelerator_type or accelerator_count == 0:
        return Place(machine_type, machine.memory_gib)
    accelerator = ACCELERATORS.get(accelerator_type)
    if accelerator is None:
        raise UnknownMachine(
            f"{key}.accelerator_type {accelerator_type!r} is not a Vertex GPU the fit check "
            f"knows{_close(accelerator_type, ACCELERATORS)}"
        )
    if machine.gpu is not None and machine.gpu != accelerator_type:
        raise UnknownMachine(
            f"{key}.accelerator_type {accelerator_type!r}: {machine_type} comes with "
            f"{machine.gpu_count} × {machine.gpu} and takes no other GPU"
        )
    if machine.gpu is None and accelerator_type not in machine.attachable:
        takes = ", ".join(machine.attachable) or "none"
        raise UnknownMachine(
            f"{key}.accelerator_type {accelerator_type!r}: {machine_type} takes no such GPU "
            f"(it takes: {takes}; A100, L4 and H100 come with the A2, G2 and A3 machine types)"
        )
    return Place(machine_type, machine.memory_gib, accelerator, accelerator_count)


def _close(name: str, known: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


@dataclass(frozen=True)
class GpuProperties:
    """What torch reports of one GPU it can use (`torch.cuda.get_device_properties`)."""

    name: str  # "NVIDIA H100 80GB HBM3", "Tesla T4"
    total_memory: int  # bytes
    major: int  # compute capability
    minor: int


@functools.cache
def visible_gpus() -> tuple[GpuProperties, ...]:
    """The GPUs this process's torch can use, in its device order: CUDA_VISIBLE_DEVICES
    applies as torch reads it, since torch does the reading. Once per process; nothing is
    read past `torch.cuda.is_available()` on a machine without a usable GPU, so CUDA is never
    initialised there. Tests replace this function to describe a machine they do not have."""
    import torch

    if not torch.cuda.is_available():
        return ()
    return tuple(
        GpuProperties(props.name, int(props.total_memory), int(props.major), int(props.minor))
        for props in map(torch.cuda.get_device_properties, range(torch.cuda.device_count()))
    )


def local_accelerator(gpus: Sequence[GpuProperties]) -> Accelerator | None:
    """The GPUs of this machine as one `Accelerator` (a run puts one process on each), None
    without any. On a machine with mixed GPUs the smallest memory and the lowest compute
    capability decide: every process must fit, and `auto` picks one dtype for all."""
    if not gpus:
        return None
    smallest = min(gpus, key=lambda gpu: gpu.total_memory)
    label = smallest.name
    if len({gpu.name for gpu in gpus}) > 1:
        label += " (the smallest of mixed GPUs)"
    return Accelerator(
        name=smallest.name,
        label=label,
        memory_gib=smallest.total_memory / 2**30,
        capability=min(gpu.major + gpu.minor / 10 for gpu in gpus),
    )


def no_gpu_reason() -> str:
    """Why torch sees no GPU here, in words: the build, the environment, or the machine."""
    import torch

    if torch.version.cuda is None and torch.version.hip is None:
        return f"this torch, {torch.__version__}, is built without CUDA"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and not hidden.strip():
        return "CUDA_VISIBLE_DEVICES is empty"
    return "torch.cuda.is_available() is False: no GPU, or no driver for it"


#: How `this_machine` names itself, and how a row tells this computer from a Vertex machine.
THIS_MACHINE = "this machine"


def this_machine() -> Place:
    """This computer: its memory (physical RAM, or the container's memory limit if lower)
    and the GPUs torch sees on it (`visible_gpus`)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limit = _cgroup_limit()
    if limit is not None:
        total = min(total, limit)
    gpus = visible_gpus()
    accelerator = local_accelerator(gpus)
    return Place(THIS_MACHINE, total / 2**30, accelerator, len(gpus) if accelerator else 0)


def _cgroup_limit() -> int | None:
    """The memory limit of this process's cgroup (v2, then v1), if one is set."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text)
    return None
