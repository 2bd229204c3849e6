"""The ZeRO stage `train.zero_stage: "auto"` takes: the cheapest plan the fit check says fits.

The rule: the first of

    0 (no DeepSpeed: the plain HF Trainer, DDP over several processes),
    ZeRO-1, ZeRO-2, ZeRO-3,
    ZeRO-3 with the optimizer offloaded to CPU,
    ZeRO-3 with the optimizer and the parameters offloaded to CPU,

whose per-process training estimate (`states.training_memory`, the fit table's finetune row)
fits the device's memory with `MARGIN` to spare, and whose host estimate fits the machine's
RAM. With LoRA the frozen base counts as weights only (no gradients, no optimizer states:
`states.py`), so a LoRA run whose base fits a GPU whole trains without ZeRO-3.

Why first-that-fits is also fastest, on one device and on several:

* One GPU or one CPU process: there is nothing to partition over, so each stage only adds
  work. Measured: ZeRO-3 cost 3.9x the plain Trainer's time on one H200 for 2% less memory,
  and 3.5x on 2 CPU cores (the demo's configs/local.json).
* Several GPUs or nodes: per step, DDP's all-reduce of every gradient is a reduce-scatter
  plus an all-gather, 2 parameters' worth of elements per rank. ZeRO-1 and ZeRO-2 move the
  same: a reduce-scatter of the gradients and an all-gather of the updated parameters
  (Rajbhandari et al. 2020, section 7). ZeRO-3 gathers the parameters again for backward,
  3 in all: 1.5x. Offload adds PCIe traffic each step (gradients down, parameters up) and
  runs the optimizer on the CPU. So each plan down the list moves as many bytes per step as
  the one before or more, and saves memory only; the first that fits is the cheapest. Where
  0 and ZeRO-1/2 tie on traffic the plain Trainer is taken: it skips DeepSpeed's per-step
  bookkeeping. (In bytes DDP under autocast reduces fp32 gradients where DeepSpeed's bf16
  reduces 16-bit ones; what that is worth between nodes is unmeasured here.)

On a CPU the "device" is host memory, where offloading moves nothing, so the offload plans
are not tried. A model whose shape cannot be read gets the safe default: ZeRO-3 on GPUs
(every stage below it needs more memory per GPU), 0 on a CPU (the plain Trainer runs where
anything does, and it was the faster there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llm_pipeline.fit.memory import CUDA_HOST_RUNTIME_GIB, GIB, Breakdown, Lengths
from llm_pipeline.fit.places import Where
from llm_pipeline.fit.rows import count
from llm_pipeline.fit.shapes import ModelShape
from llm_pipeline.fit.states import ZeroPlan, training_memory

#: Share of a device's memory a chosen plan leaves spare. The fit check's GPU estimates read
#: 0.97-1.17 of what nvidia-smi showed on an H200 (issue 29), and nvidia-smi counts the
#: allocator's cache, which PyTorch empties before it runs out: 10% keeps that spread clear.
MARGIN = 0.10

#: What `auto` tries, cheapest first (the module docstring says why that order).
LADDER: tuple[ZeroPlan | None, ...] = (
    None,
    ZeroPlan(1),
    ZeroPlan(2),
    ZeroPlan(3),
    ZeroPlan(3, offload_optimizer="cpu"),
    ZeroPlan(3, offload_optimizer="cpu", offload_param="cpu"),
)

Estimate = Callable[[ZeroPlan | None], tuple[Breakdown, float]]


@dataclass(frozen=True)
class StageChoice:
    """A run's ZeRO plan (None: no DeepSpeed), the setting that decided it, and why."""

    plan: ZeroPlan | None
    source: str  # "auto", or the setting that fixed it: "train.zero_stage", ...
    reason: str = ""

    @property
    def stage(self) -> int:
        return 0 if self.plan is None else self.plan.stage

    @property
    def offload_optimizer(self) -> str:
        return "none" if self.plan is None else self.plan.offload_optimizer

    @property
    def offload_param(self) -> str:
        return "none" if self.plan is None else self.plan.offload_param

    def describe(self) -> str:
        """`0 (auto: no DeepSpeed: the whole training state, ...)`, `3, optimizer offloaded
        to cpu (train.zero_stage)`: what follows "ZeRO stage: " in the summary and report."""
        why = f"{self.source}: {self.reason}" if self.reason else self.source
        return f"{self.stage}{_offload_words(self.plan)} ({why})"


def choose_stage(
    shape: ModelShape,
    where: Where,
    lengths: Lengths,
    *,
    checkpointing: bool,
    freeze_encoder: bool = False,
    offload_optimizer: str = "none",
    offload_param: str = "none",
) -> StageChoice:
    """The first plan of `LADDER` that fits `where` (module docstring).

    Offload the user set (`train.offload_optimizer`, `train.offload_param` beside `auto`)
    is kept: only plans that can take it are tried, offloading at least that much."""

    def estimate(plan: ZeroPlan | None) -> tuple[Breakdown, float]:
        return training_memory(
            shape,
            lengths=lengths,
            dtype=where.dtype,
            device=where.device,
            checkpointing=checkpointing,
            zero=plan,
            processes_per_node=where.processes,
            nodes=where.nodes,
            freeze_encoder=freeze_encoder,
        )

    return _choose_from(estimate, where, _ladder(where, offload_optimizer, offload_param))


def _choose_from(
    estimate: Estimate, where: Where, ladder: tuple[ZeroPlan | None, ...]
) -> StageChoice:
    """The first plan of `ladder` whose `estimate` fits `where`; the last when none does (the
    fit check then refuses it, naming what else would fit)."""
    missed: list[str] = []  # each plan tried, with what it needs that does not fit
    for plan in ladder:
        per_process, host = estimate(plan)
        need, host_need = _needs(where, per_process, host)
        device_fits = need <= _capacity(where) * (1 - MARGIN)
        if device_fits and host_need <= where.place.host_gib * GIB:
            return StageChoice(plan, "auto", _reason(where, plan, need, missed))
        missed.append(
            f"{_name(plan)} {need / GIB:.1f} GiB"
            if not device_fits
            else f"{_name(plan)} {host_need / GIB:.1f} GiB of host RAM"
        )
    if where.device == "cpu":
        needs = f"{need / GIB:.1f} GiB"
        room = f"{_room(where)} with {MARGIN:.0%} to spare"
    else:
        needs = f"{need / GIB:.1f} GiB per GPU and {host_need / GIB:.1f} GiB of host RAM"
        room = (
            f"{_room(where)} with {MARGIN:.0%} to spare and {where.place.host_gib:.4g} GiB of "
            "host RAM"
        )
    return StageChoice(plan, "auto", f"nothing fits {room}; the last plan tried needs {needs}")


def unknown_shape_choice(where: Where, why: str) -> StageChoice:
    """The safe default when the model's shape cannot be read (module docstring)."""
    if where.device == "cuda":
        return StageChoice(
            ZeroPlan(3),
            "auto",
            f"the model's shape is unknown ({why}), so the stage that "
            "needs least per GPU without offload",
        )
    return StageChoice(
        None, "auto", f"the model's shape is unknown ({why}); on a CPU the plain Trainer"
    )


def _ladder(
    where: Where, offload_optimizer: str, offload_param: str
) -> tuple[ZeroPlan | None, ...]:
    """`LADDER` for `where`: without offload on a CPU; on GPUs with the user's offload on
    every plan that can take it (optimizer offload: ZeRO-1 to 3; parameters: ZeRO-3)."""
    if where.device == "cpu":
        return tuple(plan for plan in LADDER if plan is None or plan.offload_optimizer == "none")
    plans: list[ZeroPlan | None] = []
    for plan in LADDER:
        if plan is None:
            if offload_optimizer == offload_param == "none":
                plans.append(None)
            continue
        if offload_param != "none" and plan.stage != 3:
            continue
        candidate = ZeroPlan(
            plan.stage,
            offload_optimizer if offload_optimizer != "none" else plan.offload_optimizer,
            offload_param if offload_param != "none" else plan.offload_param,
        )
        if candidate not in plans:
            plans.append(candidate)
    return tuple(plans)


def _needs(where: Where, per_process: Breakdown, host: float) -> tuple[float, float]:
    """Bytes against the device (per GPU; on a CPU the node's processes together) and
    against host RAM (on a GPU node: the processes' runtime and DeepSpeed's host estimate)."""
    if where.device == "cpu":
        total = per_process.total * where.processes
        return total, total
    return per_process.total, where.processes * CUDA_HOST_RUNTIME_GIB * GIB + host


def _capacity(where: Where) -> float:
    accelerator = where.place.accelerator
    if where.device == "cuda" and accelerator is not None:
        return accelerator.memory_gib * GIB
    return where.place.host_gib * GIB


def _room(where: Where) -> str:
    """`40 GiB per A100 40GB`, `15.5 GiB of RAM on this machine (1 process)`."""
    accelerator = where.place.accelerator
    if where.device == "cuda" and accelerator is not None:
        return f"{accelerator.memory_gib:.4g} GiB per {accelerator.label}"
    return (
        f"{where.place.host_gib:.4g} GiB of RAM on {where.place.machine} "
        f"({count(where.processes, 'process')})"
    )


def _reason(where: Where, plan: ZeroPlan | None, need: float, missed: list[str]) -> str:
    per = "" if where.device == "cpu" else " per GPU"
    what = "no DeepSpeed: the whole training state" if plan is None else _name(plan)
    text = f"{what}, {need / GIB:.1f} GiB{per}, fits {_room(where)} with {MARGIN:.0%} to spare"
    return text + (f" ({', '.join(missed)} do not)" if missed else "")


def _name(plan: ZeroPlan | None) -> str:
    return "no ZeRO" if plan is None else f"ZeRO-{plan.stage}{_offload_words(plan)}"


def _offload_words(plan: ZeroPlan | None) -> str:
    """`, optimizer offloaded to cpu`, `, optimizer and parameters offloaded to cpu`, or ""."""
    if plan is None or "none" == plan.offload_optimizer == plan.offload_param:
        return ""
    if plan.offload_param == "none":
        return f", optimizer offloaded to {plan.offload_optimizer}"
    if plan.offload_optimizer == "none":
        return f", parameters offloaded to {plan.offload_param}"
    devices = {plan.offload_optimizer, plan.offload_param}
    return f", optimizer and parameters offloaded to {' and '.join(sorted(devices))}"
