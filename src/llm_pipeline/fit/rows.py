"""The fit check's table rows, and the words its messages share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llm_pipeline.fit.machines import THIS_MACHINE
from llm_pipeline.fit.memory import GIB, Breakdown
from llm_pipeline.fit.places import Where


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


def count(number: int, word: str) -> str:
    """`1 process`, `16 processes`."""
    return f"{number} {word}{'' if number == 1 else 'es' if word.endswith('s') else 's'}"


def gib(value: float) -> str:
    """`~20.5 GiB`."""
    return f"~{value / GIB:.1f} GiB"


def memory_label(where: Where) -> str:
    """`per A100 40GB`, or `of host RAM on n1-standard-8 (30 GiB)`."""
    place = where.place
    if place.accelerator is not None:
        return f"per {place.accelerator.label}"
    return f"of host RAM on {place.machine} ({place.host_gib:.4g} GiB)"


#: The setting that picks each place's machine, for messages.
MACHINE_KEYS = {"finetune": "cluster.machine_type", "evaluate": "cluster.machine_type"}


def host_row(place: str, where: Where, estimate: Breakdown, settings: str, key: str) -> Row:
    """The host-memory row of a place, refused when the estimate exceeds the machine's."""
    capacity = where.place.host_gib
    per = " per node" if where.nodes > 1 else ""
    problem = None
    if estimate.total / GIB > capacity:
        problem = (
            f"{key} {where.place.machine} has {capacity:.4g} GiB of host RAM; {place} needs "
            f"{gib(estimate.total)}{per} ({estimate.describe()}; {settings})"
        )
    return Row(place, where.place.label, "host", capacity, estimate, settings, problem)


def largest(fits: Callable[[int], bool], below: int) -> int:
    """The largest n in [1, below) with fits(n), 0 when none (fits grows false with n)."""
    low, high = 0, below
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def machine_key(place: str, where: Where) -> str:
    """The setting that chose this machine (this computer's memory has none)."""
    if where.place.machine == THIS_MACHINE:
        return "this machine:"
    return MACHINE_KEYS.get(place, "deploy.machine_type")
