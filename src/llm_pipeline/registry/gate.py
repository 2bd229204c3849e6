"""The should-deploy gate: compare a new model with the version the endpoint serves now.

The comparison is with what users get today — the endpoint's most-trafficked version — not
with the newest or the oldest registered version: a newer version that never shipped (it
lost its own gate) says nothing about what the new model must beat.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llm_pipeline.config.deploy import DeployPolicyConfig
from llm_pipeline.registry.base import ModelVersion, RegistryError


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
    served: ModelVersion | None,
    policy: DeployPolicyConfig,
) -> Decision:
    """Whether the model with `metrics` should replace `served` (None: nothing is served).

    Order: the deciding metric must exist; `override` wins (the reason says so); a missed
    floor blocks; with nothing served, `deploy_if_nothing_served` decides; otherwise the new
    value must beat the served one by more than zero and by at least `min_improvement`.
    """
    name = policy.metric
    if name is None:
        # PipelineConfig fills it from the task; a policy built on its own must name it.
        raise GateError("deploy_policy.metric is not set: name the metric the gate compares")
    value = _metric(metrics, name, "the new model")
    missed = _missed_floors(metrics, policy.floors)
    served_value = None
    if served is not None:
        served_value = _metric(served.metrics, name, f"the served version {served.ref}")
    comparison = _comparison(name, value, served, served_value)
    if policy.override != "auto":
        deploy = policy.override == "always"
        verb = "deploying" if deploy else "not deploying"
        extra = f" (floors missed: {'; '.join(missed)})" if missed and deploy else ""
        return Decision(
            deploy,
            f"{comparison}: deploy_policy.override is {policy.override!r}, {verb}{extra}",
            name,
            value,
            served,
            served_value,
        )
    if missed:
        reason = f"{comparison}: below deploy_policy.floors ({'; '.join(missed)}), not deploying"
        return Decision(False, reason, name, value, served, served_value)
    if served is None or served_value is None:
        deploy = policy.deploy_if_nothing_served
        tail = (
            "deploying the first version"
            if deploy
            else "not deploying (deploy_policy.deploy_if_nothing_served is false)"
        )
        return Decision(deploy, f"{comparison}: {tail}", name, value, served, served_value)
    delta = value - served_value
    needed = policy.min_improvement
    if delta <= 0:
        verdict = f"{delta:+.4g} is no improvement, not deploying"
        deploy = False
    elif delta < needed:
        verdict = f"{delta:+.4g} < min_improvement {needed:g}, not deploying"
        deploy = False
    else:
        verdict = f"{delta:+.4g} >= min_improvement {needed:g}, deploying"
        deploy = True
    return Decision(deploy, f"{comparison}: {verdict}", name, value, served, served_value)


def _comparison(
    name: str, value: float, served: ModelVersion | None, served_value: float | None
) -> str:
    if served is None or served_value is None:
        return f"{name} {value:.4g}, the endpoint serves nothing yet"
    return f"{name} {value:.4g} vs {served_value:.4g} served by version {served.ref}"
