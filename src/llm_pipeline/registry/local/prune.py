"""`registry prune`: which versions of the local registry keep their files, which lose them.

Every registered version is a full copy of its model (about 188 MB for the demo), so a
weekly run fills a disk in months. Prune keeps, per model, every version an endpoint serves
now (with any traffic) and the last `keep_served` versions that endpoints served before,
always with the one each endpoint's `rollback` returns to (what it served just before its
last change, as `endpoints.rollback_plan` picks it), unless `keep_served` is 0; every other
version's files go, never-served ones included, but for each model's newest version (a
deploy may have just registered it).
A pruned version keeps its record (`version.json`, marked `pruned`), so the endpoint
histories that name it stay true; `serve`, `rollback` and `deploy` refuse it.

The plan is pure: it takes the versions and the endpoint records as they are and returns
what to keep and what to delete, with the reason for each.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from llm_pipeline.registry.base import ModelVersion, serving_key
from llm_pipeline.registry.local.records import EndpointRecord, Share

#: `--keep-served`'s default: the version a rollback returns to, and one more.
DEFAULT_KEEP_SERVED = 2


@dataclass(frozen=True)
class Verdict:
    """One version and why prune keeps or deletes its files."""

    version: ModelVersion
    reason: str


@dataclass(frozen=True)
class PrunePlan:
    """What prune keeps and deletes, oldest first within a model. `finish`: versions an
    earlier prune marked pruned but was stopped before it moved their files away."""

    keep: tuple[Verdict, ...]
    delete: tuple[Verdict, ...]
    finish: tuple[ModelVersion, ...] = ()


@dataclass(frozen=True)
class PruneOutcome:
    """What a prune did: the `plan` it followed (made under the lock), the versions it
    pruned with the bytes each freed, those it left alone because a deploy was checking
    them (`busy`), and the bytes of what an earlier, stopped prune had left (`unfinished`)."""

    plan: PrunePlan
    pruned: tuple[tuple[Verdict, int], ...]
    busy: tuple[Verdict, ...]
    unfinished: int

    @property
    def freed(self) -> int:
        return sum(size for _verdict, size in self.pruned) + self.unfinished


def serving_ref(shares: Sequence[Share], created: Mapping[str, str]) -> str | None:
    """The version (`model@version`) a split serves, as `EndpointState.serving` picks it
    (`serving_key`); None for an empty split."""
    live = [entry for entry in shares if entry.traffic > 0]
    if not live:
        return None
    best = max(live, key=lambda e: serving_key(e.traffic, created.get(e.ref, ""), e.version))
    return best.ref


def plan_prune(
    versions: Sequence[ModelVersion],
    endpoints: Mapping[str, EndpointRecord],
    keep_served: int = DEFAULT_KEEP_SERVED,
) -> PrunePlan:
    """What to keep and delete among `versions` (every model's) given the `endpoints`."""
    if keep_served < 0:
        raise ValueError(f"keep_served must be 0 or more, got {keep_served}")
    created = {version.ref: version.created for version in versions}
    pruned = {version.ref for version in versions if version.pruned}
    reasons: dict[str, str] = {}
    for name, record in sorted(endpoints.items()):
        for entry in record.deployed:
            reasons.setdefault(entry.ref, f"endpoint {name} serves it now")
    # When each version was last served (as its split's most-trafficked version), and what
    # `rollback` of each endpoint returns to: what it served before its last change.
    last_served: dict[str, datetime] = {}
    rollback_to: dict[str, str] = {}
    for name, record in sorted(endpoints.items()):
        for change in record.history:
            for split in (change.before, change.after):
                ref = serving_ref(split, created)
                if ref is not None and (ref not in last_served or change.time > last_served[ref]):
                    last_served[ref] = change.time
        target = serving_ref(record.history[-1].before, created) if record.history else None
        if target is not None:
            rollback_to.setdefault(target, name)
    # Per model, the last `keep_served` served before, rollback's targets first; a version
    # already pruned takes no place (an earlier, smaller --keep-served deleted its files).
    by_model: dict[str, list[tuple[bool, datetime, str]]] = {}
    for ref, time in last_served.items():
        if ref not in reasons and ref not in pruned:
            candidate = (ref in rollback_to, time, ref)
            by_model.setdefault(ref.rpartition("@")[0], []).append(candidate)
    for served in by_model.values():
        ordered = sorted(served, reverse=True)
        # Every endpoint's rollback target, even past `keep_served` (two endpoints of one
        # model at --keep-served 1): rollback must keep working. None at --keep-served 0.
        targets = [entry for entry in ordered if entry[0]] if keep_served else []
        others = [entry for entry in ordered if not entry[0]]
        for is_target, _time, ref in targets + others[: max(keep_served - len(targets), 0)]:
            reasons[ref] = (
                f"`rollback` of endpoint {rollback_to[ref]} returns to it"
                if is_target
                else f"served before, one of the last {keep_served}"
            )
    # Each model's newest version, never served, may be one a deploy has just registered and
    # not yet started checking (`deploy` holds a version only from its check on): kept.
    newest: dict[str, ModelVersion] = {}
    for version in versions:
        if version.model not in newest or int(version.version) > int(newest[version.model].version):
            newest[version.model] = version
    for version in newest.values():
        if version.ref not in last_served and not version.pruned:
            reasons.setdefault(version.ref, "the newest version: a deploy may be about to check it")
    keep, delete, finish = [], [], []
    for version in versions:
        if version.pruned:
            if not version.files_missing:  # an earlier prune stopped before moving them
                finish.append(version)
        elif version.ref in reasons:
            keep.append(Verdict(version, reasons[version.ref]))
        elif version.ref in last_served:
            older = f"older than the last {keep_served}" if keep_served else "--keep-served 0"
            delete.append(Verdict(version, f"served before, {older}"))
        else:
            delete.append(Verdict(version, "never served"))
    return PrunePlan(tuple(keep), tuple(delete), tuple(finish))
