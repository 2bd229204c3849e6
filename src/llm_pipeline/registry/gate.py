"""The should-deploy gate: compare a new model with the version the endpoint serves now.

The comparison is with what users get today — the endpoint's most-trafficked version — not
with the newest or the oldest registered version: a newer version that never shipped (it
lost its own gate) says nothing about what the new model must beat.

And it compares like with like: scores on the same evaluation rows, scored the same way.
The best such score is the served version's own on this run's rows (the evaluate step
scores it where it can load it: the *champion*); else its recorded score, when it was
recorded for the same evaluation (`EVALUATION_DATA_LABEL`, the fingerprint of the rows and
settings); else there is nothing to compare with, the reason says so, and
`deploy_if_nothing_served` decides, as for an empty endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from llm_pipeline.config.deploy import DeployPolicyConfig
from llm_pipeline.registry.base import EVALUATION_DATA_LABEL, ModelVersion, RegistryError


class GateError(RegistryError):
    """The gate cannot decide: a metric it needs is missing."""


@dataclass(frozen=True)
class Decision:
    """The gate's answer and one sentence that says why, with the numbers."""

    deploy: bool
    reason: str
    metric: str
    value: float
    served: ModelVersion | None = None
    served_value: float | None = None

    @property
    def improvement(self) -> float | None:
        """New minus served, for the deciding metric; None when nothing is served."""
        return None if self.served_value is None else self.value - self.served_value


@dataclass(frozen=True)
class Champion:
    """The served version as the evaluate step scored it on this run's rows (`version`,
    `model@version`, and its `metrics`), or why it did not (`version` None, `note`)."""

    version: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> str:
        return json.dumps({"version": self.version, "metrics": self.metrics, "note": self.note})

    @classmethod
    def from_json(cls, text: str) -> Champion:
        """What `to_json` wrote; empty text: nothing was scored, nothing said."""
        if not text.strip():
            return cls()
        payload = json.loads(text)
        metrics = {str(k): float(v) for k, v in dict(payload.get("metrics") or {}).items()}
        return cls(payload.get("version"), metrics, str(payload.get("note") or ""))


@dataclass(frozen=True)
class Served:
    """The served version, and its scores that the new model's may be compared with
    (`metrics`; None: none may) with the reason they may or may not (`basis`)."""

    version: ModelVersion
    metrics: Mapping[str, float] | None
    basis: str


def served_scores(
    version: ModelVersion | None, *, champion: Champion, fingerprint: str
) -> Served | None:
    """What the gate compares with: the `champion`'s scores when it is the served
    `version`; else the version's recorded scores when they were recorded for the same
    evaluation (`fingerprint`); else no scores, and why. None when nothing is served."""
    if version is None:
        return None
    if champion.version == version.ref and champion.metrics:
        rows = champion.metrics.get("samples")
        count = f"{rows:.0f} " if rows is not None else ""
        basis = f"both scored on this run's {count}evaluation rows"
        return Served(version, champion.metrics, basis)
    recorded = version.labels.get(EVALUATION_DATA_LABEL)
    if fingerprint and recorded == fingerprint:
        return Served(version, version.metrics, "scored on the same evaluation rows and settings")
    why = (
        "it was scored on other evaluation rows or settings"
        if recorded
        else "its registration records no evaluation data to compare with"
    )
    if champion.note:
        why += f", and {champion.note}"
    return Served(version, None, why)


def _metric(metrics: Mapping[str, float], name: str, whose: str) -> float:
    if name not in metrics:
        known = ", ".join(sorted(metrics)) or "none"
        raise GateError(f"{whose} has no metric {name!r}; the metrics it has: {known}")
    return float(metrics[name])


def _missed_floors(metrics: Mapping[str, float], floors: Mapping[str, float]) -> list[str]:
    missed = []
    for name, floor in sorted(floors.items()):
        value = _metric(metrics, name, "the new model (deploy_policy.floors)")
        if value < floor:
            missed.append(f"{name} {value:g} < floor {floor:g}")
    return missed


def decide(
    metrics: Mapping[str, float],
    served: Served | None,
    policy: DeployPolicyConfig,
) -> Decision:
    """Whether the model with `metrics` should replace what is served (None: nothing is).

    Order: the deciding metric must exist; `override` wins (the reason says so); a missed
    floor blocks; with nothing served, or nothing served that can be compared (scored on
    other data), `deploy_if_nothing_served` decides; otherwise the new value must beat the
    served one by more than zero and by at least `min_improvement`.
    """
    name = policy.metric
    if name is None:
        # PipelineConfig fills it from the task; a policy built on its own must name it.
        raise GateError("deploy_policy.metric is not set: name the metric the gate compares")
    value = _metric(metrics, name, "the new model")
    missed = _missed_floors(metrics, policy.floors)
    version = served.version if served else None
    served_value = None
    if served is not None and served.metrics is not None:
        served_value = _metric(served.metrics, name, f"the served version {served.version.ref}")
    comparison = _comparison(name, value, served, served_value)

    def decision(deploy: bool, verdict: str) -> Decision:
        return Decision(deploy, f"{comparison}: {verdict}", name, value, version, served_value)

    if policy.override != "auto":
        deploy = policy.override == "always"
        verb = "deploying" if deploy else "not deploying"
        extra = f" (floors missed: {'; '.join(missed)})" if missed and deploy else ""
        return decision(deploy, f"deploy_policy.override is {policy.override!r}, {verb}{extra}")
    if missed:
        return decision(False, f"below deploy_policy.floors ({'; '.join(missed)}), not deploying")
    if served_value is None:
        deploy = policy.deploy_if_nothing_served
        if deploy:
            tail = "deploying the first version" if served is None else "deploying"
        else:
            tail = "not deploying (deploy_policy.deploy_if_nothing_served is false)"
        return decision(deploy, tail)
    delta = value - served_value
    needed = policy.min_improvement
    if delta <= 0:
        return decision(False, f"{delta:+.4g} is no improvement, not deploying")
    if delta < needed:
        return decision(False, f"{delta:+.4g} < min_improvement {needed:g}, not deploying")
    return decision(True, f"{delta:+.4g} >= min_improvement {needed:g}, deploying")


def _comparison(name: str, value: float, served: Served | None, served_value: float | None) -> str:
    if served is None:
        return f"{name} {value:.4g}, the endpoint serves nothing yet"
    ref = served.version.ref
    if served_value is None:
        recorded = served.version.metrics.get(name)
        its = "" if recorded is None else f" (its recorded {name} {recorded:.4g} is not comparable)"
        return (
            f"{name} {value:.4g}; the endpoint serves version {ref}, which cannot be compared "
            f"with it: {served.basis}{its}"
        )
    return f"{name} {value:.4g} vs {served_value:.4g} served by version {ref} ({served.basis})"
