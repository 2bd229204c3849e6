"""The registry interface both backends implement: model versions, endpoints, traffic.

A *version* is one registered model (its files, metrics, labels and provenance). An
*endpoint* serves one or more versions with a traffic split in percent; the version with
the most traffic is the one it *serves*, and that is what the should-deploy gate compares a
new model with — never the newest or the oldest registered version.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_pipeline.errors import UserError

#: The label every version the pipeline registers carries: the fingerprint of the
#: evaluation that scored it (its rows and settings, `evaluation.fingerprint`). The gate
#: compares recorded scores only between versions with the same one.
EVALUATION_DATA_LABEL = "evaluation_data"
#: The label of a version whose run started from another registered version (`registry:`
#: model source): `model@version` (Vertex: the model here, its version under the next key,
#: as label values hold no `@`).
STARTED_FROM_LABEL = "started_from"
STARTED_FROM_VERSION_LABEL = "started_from_version"


class RegistryError(UserError):
    """The registry cannot do what was asked (a damaged file, an unknown version, ...)."""


class RegistryUnreachable(RegistryError):
    """The registry cannot be asked from here (no project, no credentials, no network), as
    opposed to one that answered that something is not there."""


class DeployError(UserError):
    """A new version did not come up healthy; traffic was left where it was."""


@dataclass(frozen=True)
class ModelVersion:
    """One registered version of a model."""

    model: str  #: the model's name (Vertex: display name of the parent model)
    version: str  #: "1", "2", ... (Vertex: the version id)
    uri: str  #: the model folder (local path; Vertex: the artifact URI on gs://)
    metrics: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    created: str = ""  #: ISO 8601, UTC
    run: str | None = None  #: the pipeline run that made it
    resource_name: str | None = None  #: Vertex: projects/P/locations/L/models/ID@VERSION
    #: Environment the prediction server needs for this version (prefix, input limit).
    serving_env: dict[str, str] = field(default_factory=dict)
    #: Local: when `registry prune` deleted its files (ISO 8601, UTC); "" while it has them.
    #: Its record stays, so the history that names it stays true.
    pruned: str = ""
    #: Local: its record is there but its model files are not (deleted by hand, not pruned).
    files_missing: bool = False

    @property
    def ref(self) -> str:
        """`model@version`, as messages and the CLI name it."""
        return f"{self.model}@{self.version}"

    @property
    def started_from(self) -> str | None:
        """The registered version (`model@version`) its run started from, if it did."""
        start = self.labels.get(STARTED_FROM_LABEL)
        version = self.labels.get(STARTED_FROM_VERSION_LABEL)
        return f"{start}@{version}" if start and version else start


def utc_time(iso: str) -> str:
    """A record's ISO 8601 UTC time as a person reads it: `2026-11-27 13:35:37 UTC`."""
    return f"{iso[:19].replace('T', ' ')} UTC"


def files_gone(version: ModelVersion) -> str | None:
    """Why `version` has no model files to load (pruned, or deleted by hand), or None."""
    if version.pruned:
        when = utc_time(version.pruned)
        return (
            f"it was pruned ({when}, by `registry prune`), so its files are deleted; its "
            "record stays for the history"
        )
    if version.files_missing:
        return (
            f"its model files are missing from {version.uri} (deleted by hand?); its record "
            "is there but it cannot be loaded"
        )
    return None


def ensure_files(version: ModelVersion, doing: str) -> ModelVersion:
    """`version`, or a one-line RegistryError saying that `doing` it ("serve", "roll back
    to") is impossible because its files are gone (`files_gone`)."""
    why = files_gone(version)
    if why is not None:
        raise RegistryError(f"cannot {doing} {version.ref}: {why}")
    return version


def serving_key(traffic: int, created: str, version: str) -> tuple[int, str, int, str]:
    """What decides which version of a split serves: the most traffic, ties to the newest
    registered, then the higher number (as a number: @10 is newer than @9; a version id
    that is no number, by its text)."""
    return traffic, created, int(version) if version.isdigit() else -1, version


@dataclass(frozen=True)
class Deployed:
    """A version on an endpoint and the share of traffic it takes."""

    version: ModelVersion
    traffic: int  #: percent, 0-100
    deployed_id: str = ""  #: Vertex: the deployed model id; local: the version


@dataclass(frozen=True)
class EndpointState:
    """What an endpoint serves now. `deployed` is empty for an endpoint that serves nothing
    (or does not exist yet)."""

    name: str
    deployed: tuple[Deployed, ...] = ()
    resource_name: str | None = None

    @property
    def serving(self) -> Deployed | None:
        """The deployed version with the most traffic (ties: the newest registered)."""
        live = [d for d in self.deployed if d.traffic > 0]
        if not live:
            return None
        return max(live, key=lambda d: serving_key(d.traffic, d.version.created, d.version.version))


@dataclass(frozen=True)
class DeployOutcome:
    """What a deploy changed."""

    endpoint: EndpointState  #: after the change
    version: ModelVersion  #: the version that now takes traffic
    previous: ModelVersion | None  #: the version served before (None: nothing was)
    retired: tuple[ModelVersion, ...] = ()  #: versions taken off the endpoint
    prediction: str = ""  #: the answer to the probe request


@dataclass(frozen=True)
class RollbackOutcome:
    """A rollback moved the endpoint from one version back to another."""

    endpoint: EndpointState
    moved_from: ModelVersion
    moved_to: ModelVersion


def ensure_still_served(state: EndpointState, expected: str | None) -> None:
    """DeployError when `state` no longer serves `expected` (a `model@version` ref, "" for
    nothing): another run moved the endpoint since the gate compared with it. None: no
    expectation, nothing to check."""
    if expected is None:
        return
    now = state.serving.version.ref if state.serving else ""
    if now != expected:
        raise DeployError(
            f"endpoint {state.name} now serves {now or 'nothing'}, but the gate compared with "
            f"{expected or 'nothing'}: another run deployed in between; not moving traffic "
            "(rerun to compare with what is served now)"
        )


#: Brings a version up and checks it (health, then one prediction per probe instance);
#: returns the first prediction (as `prediction_text` shows it), raises DeployError with
#: the reason on failure.
VersionCheck = Callable[[ModelVersion, Sequence[Any]], str]


def prediction_text(prediction: Any) -> str:
    """A served prediction as text, for the probe's check and the deploy report: a text as
    it is, anything else as JSON. Empty ("") means no answer: null or a blank text; an
    object or a list is an answer even when empty (a multi-label classifier may predict no
    label for a text)."""
    if isinstance(prediction, str):
        return prediction
    return "" if prediction is None else json.dumps(prediction)


class Registry(ABC):
    """Model versions and endpoints; `LocalRegistry` and `VertexRegistry` implement it."""

    @abstractmethod
    def register(
        self,
        *,
        model: str,
        model_dir: str,
        metrics: Mapping[str, float],
        run: str | None = None,
        config: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        serving_env: Mapping[str, str] | None = None,
    ) -> ModelVersion:
        """Add `model_dir` as the next version of `model` (created on first use)."""

    def start_labels(self, started_from: str) -> dict[str, str]:
        """The labels that record the version (`model@version`) a run started from, in the
        form this registry's labels take (`ModelVersion.started_from` reads them back)."""
        return {STARTED_FROM_LABEL: started_from}

    @abstractmethod
    def models(self) -> list[str]:
        """Names of the registered models."""

    @abstractmethod
    def versions(self, model: str) -> list[ModelVersion]:
        """Every version of `model`, oldest first; empty for an unknown model."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where this registry is, in words, for messages (a folder; a project and region)."""

    @abstractmethod
    def version(self, model: str, version: str) -> ModelVersion:
        """Version `version` of `model`; RegistryError naming the versions it has."""

    @abstractmethod
    def endpoints(self) -> list[EndpointState]:
        """Every endpoint and what it serves."""

    @abstractmethod
    def endpoint(self, name: str) -> EndpointState:
        """The endpoint called `name`; an empty state when it does not exist yet."""

    @abstractmethod
    def deploy(
        self,
        version: ModelVersion,
        endpoint: str,
        *,
        traffic_percent: int = 100,
        probe: Sequence[Any] = (),
        expect_served: str | None = None,
    ) -> DeployOutcome:
        """Bring `version` up on `endpoint`, check it, then move `traffic_percent` to it.

        `expect_served` is what the gate compared with (`model@version`, "" for nothing):
        checked again just before traffic moves, so that two runs that finish together
        cannot both replace the same version (the later one gets a DeployError).

        The endpoint is created when missing. Traffic moves only after the version is up
        and has answered every probe instance; at 100% the versions that served before are
        retired, below 100% (a canary) the previously served version keeps the rest. On a
        failed check, DeployError, and the endpoint serves exactly what it served before.
        """

    @abstractmethod
    def rollback(self, endpoint: str) -> RollbackOutcome:
        """Serve again, with all traffic, the version the endpoint served before its last
        change. RegistryError when there is nothing to roll back to."""

    def ever_served(self) -> set[str] | None:
        """Every version (`model@version`) an endpoint has given traffic at some time; None
        where the registry keeps no endpoint history to tell (Vertex AI's)."""
        return None

    def served_version(self, endpoint: str) -> ModelVersion | None:
        """The version `endpoint` serves now (most traffic); None when it serves nothing."""
        serving = self.endpoint(endpoint).serving
        return serving.version if serving else None
