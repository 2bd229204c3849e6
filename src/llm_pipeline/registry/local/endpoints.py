"""Endpoints of the local registry: their files, and how deploy and rollback move traffic.

An endpoint file holds the split it serves now and the history of every change (time,
action, split before and after); rollback reads the history, so it needs nothing else.
The functions that decide a new split are pure: they take the endpoint as it is and the
request, and return the split to write or a RegistryError saying why not.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from llm_pipeline.registry.base import Deployed, EndpointState, ModelVersion, RegistryError
from llm_pipeline.registry.local.records import (
    NAME_PATTERN,
    Change,
    EndpointRecord,
    Share,
    dump,
    load,
    now,
)
from llm_pipeline.storage import is_temp_file, write_atomic

#: Turns a share into the registered version it names; the path is the file naming it,
#: for the message when that version is missing.
Resolver = Callable[[Share, Path], ModelVersion]


def share(version: ModelVersion, traffic: int) -> Share:
    """`version` with `traffic` percent, as endpoint files store it."""
    return Share(model=version.model, version=version.version, traffic=traffic)


@dataclass(frozen=True)
class Moved:
    """What a deploy did to an endpoint (`after` is `before` when nothing had to change)."""

    before: EndpointState
    after: EndpointState
    retired: tuple[ModelVersion, ...]


class EndpointStore:
    """The endpoint files in `folder`; writes must happen under the registry lock."""

    def __init__(self, folder: Path, resolve: Resolver) -> None:
        self.folder = folder
        self._resolve = resolve

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def names(self) -> list[str]:
        """Endpoint names, sorted; temp files and strays are not endpoints."""
        if not self.folder.is_dir():
            return []
        return sorted(
            entry.stem
            for entry in self.folder.iterdir()
            if entry.suffix == ".json" and re.fullmatch(NAME_PATTERN, entry.stem)
        )

    def records(self) -> dict[str, EndpointRecord]:
        """Every endpoint's record, by name (one removed meanwhile is left out)."""
        found = {name: self.read(name) for name in self.names()}
        return {name: record for name, record in found.items() if record is not None}

    def read(self, name: str) -> EndpointRecord | None:
        """The endpoint's record; None when it does not exist."""
        try:
            return load(self.path(name), EndpointRecord)
        except FileNotFoundError:
            return None

    def state(self, name: str, shares: list[Share]) -> EndpointState:
        """The split `shares` with each version resolved (missing ones: the file is named)."""
        path = self.path(name)
        deployed = []
        for entry in shares:
            version = self._resolve(entry, path)
            deployed.append(Deployed(version=version, traffic=entry.traffic, deployed_id=entry.ref))
        return EndpointState(name=name, deployed=tuple(deployed))

    def deploy(self, name: str, version: ModelVersion, percent: int) -> Moved:
        """Give `version` `percent` of `name`'s traffic, from the endpoint as it is now."""
        record = self.read(name) or EndpointRecord(deployed=[], history=[])
        before = self.state(name, record.deployed)
        shares = plan_deploy(before, version, percent)
        if _canonical(shares) == _canonical(record.deployed):
            return Moved(before=before, after=before, retired=())
        after = self.write_change(name, record, "deploy", shares)
        kept = {d.version.ref for d in after.deployed}
        retired = tuple(d.version for d in before.deployed if d.version.ref not in kept)
        return Moved(before=before, after=after, retired=retired)

    def write_change(
        self,
        name: str,
        record: EndpointRecord,
        action: Literal["deploy", "rollback"],
        shares: list[Share],
    ) -> EndpointState:
        """Serve `shares` from now on, adding the change to the history; the new state."""
        change = Change(time=now(), action=action, before=record.deployed, after=shares)
        updated = EndpointRecord(deployed=shares, history=[*record.history, change])
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path(name), dump(updated))
        return self.state(name, shares)

    def remove_temp_files(self) -> None:
        """Delete temp files of writers that were killed; call under the registry lock."""
        if self.folder.is_dir():
            for entry in self.folder.iterdir():
                if is_temp_file(entry):
                    entry.unlink(missing_ok=True)


def _canonical(shares: list[Share]) -> list[tuple[str, int]]:
    return sorted((entry.ref, entry.traffic) for entry in shares)


def plan_deploy(state: EndpointState, version: ModelVersion, percent: int) -> list[Share]:
    """The split after deploying `version` with `percent` of the traffic.

    100%: the version alone. Less (a canary): the version that takes the most traffic
    among the others keeps the rest, every other version leaves. A first deploy, with no
    other version to keep the rest, takes all the traffic: an endpoint serves 100%.
    """
    new = share(version, percent)
    if percent == 100:
        return [new]
    others = EndpointState(
        state.name, tuple(d for d in state.deployed if d.version.ref != version.ref)
    )
    keeper = others.serving
    if keeper is None:
        return [share(version, 100)]
    return [share(keeper.version, 100 - percent), new]


def rollback_plan(
    name: str, record: EndpointRecord, store: EndpointStore
) -> tuple[ModelVersion, ModelVersion]:
    """(from, to) for rolling `name` back: to is what it served before its last change.

    From is the version served now, or for a canary that the last change added beside the
    version it kept serving, that canary.
    """
    current = store.state(name, record.deployed)  # reports damage before anything else
    if not record.history or not record.history[-1].before:
        raise RegistryError(f"endpoint {name} has no earlier version to roll back to")
    earlier = store.state(name, record.history[-1].before).serving
    if earlier is None:  # a split adding up to 100 always has a version with traffic
        raise RegistryError(f"endpoint {name} has no earlier version to roll back to")
    target = earlier.version
    if _canonical(record.deployed) == [(target.ref, 100)]:
        raise RegistryError(
            f"endpoint {name} has no earlier version to roll back to: it serves only "
            f"{target.ref}, as it did before its last change"
        )
    others = EndpointState(name, tuple(d for d in current.deployed if d.version.ref != target.ref))
    moved_from = others.serving
    if moved_from is None:
        raise RegistryError(
            f"endpoint {name} serves nothing now ({store.path(name)}); deploy a version "
            "instead of rolling back"
        )
    return moved_from.version, target
