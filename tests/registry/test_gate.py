"""The should-deploy gate, case by case: each row is a policy, a new score and what is served."""

from __future__ import annotations

from typing import Any

import pytest

from llm_pipeline.config import DeployPolicyConfig
from llm_pipeline.registry import GateError, ModelVersion, decide


def served(version: str = "3", **metrics: float) -> ModelVersion:
    return ModelVersion(model="summarizer", version=version, uri="/m", metrics=metrics)


CASES: list[tuple[str, dict[str, Any], dict[str, float], ModelVersion | None, bool, str]] = [
    (
        "better",
        {},
        {"rougeLsum": 31.2},
        served(rougeLsum=30.8),
        True,
        "rougeLsum 31.2 vs 30.8 served by version summarizer@3: +0.4 >= min_improvement 0, "
        "deploying",
    ),
    (
        "worse",
        {},
        {"rougeLsum": 29.0},
        served(rougeLsum=30.8),
        False,
        "rougeLsum 29 vs 30.8 served by version summarizer@3: -1.8 is no improvement, "
        "not deploying",
    ),
    (
        "equal",
        {},
        {"rougeLsum": 30.8},
        served(rougeLsum=30.8),
        False,
        "rougeLsum 30.8 vs 30.8 served by version summarizer@3: +0 is no improvement, "
        "not deploying",
    ),
    (
        "within min_improvement",
        {"min_improvement": 0.5},
        {"rougeLsum": 31.2},
        served(rougeLsum=30.8),
        False,
        "rougeLsum 31.2 vs 30.8 served by version summarizer@3: +0.4 < min_improvement 0.5, "
        "not deploying",
    ),
    (
        "beyond min_improvement",
        {"min_improvement": 0.5},
        {"rougeLsum": 31.4},
        served(rougeLsum=30.8),
        True,
        "+0.6 >= min_improvement 0.5, deploying",
    ),
    (
        "floor missed",
        {"floors": {"rouge1": 40.0}},
        {"rougeLsum": 35.0, "rouge1": 38.5},
        served(rougeLsum=30.8),
        False,
        "below deploy_policy.floors (rouge1 38.5 < floor 40), not deploying",
    ),
    (
        "nothing served",
        {},
        {"rougeLsum": 12.0},
        None,
        True,
        "rougeLsum 12, the endpoint serves nothing yet: deploying the first version",
    ),
    (
        "nothing served, first deploy left to a person",
        {"deploy_if_nothing_served": False},
        {"rougeLsum": 12.0},
        None,
        False,
        "deploy_if_nothing_served is false",
    ),
    (
        "nothing served but a floor missed",
        {"floors": {"rougeLsum": 20.0}},
        {"rougeLsum": 12.0},
        None,
        False,
        "rougeLsum 12 < floor 20",
    ),
    (
        "always",
        {"override": "always"},
        {"rougeLsum": 20.0},
        served(rougeLsum=30.8),
        True,
        "deploy_policy.override is 'always', deploying",
    ),
    (
        "never",
        {"override": "never"},
        {"rougeLsum": 40.0},
        served(rougeLsum=30.8),
        False,
        "deploy_policy.override is 'never', not deploying",
    ),
]


@pytest.mark.parametrize(
    ("policy", "metrics", "now", "deploy", "reason"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_gate_decides_and_says_why(
    policy: dict[str, Any],
    metrics: dict[str, float],
    now: ModelVersion | None,
    deploy: bool,
    reason: str,
) -> None:
    decision = decide(metrics, now, rouge_policy(**policy))
    assert decision.deploy is deploy
    assert reason in decision.reason


def rouge_policy(**settings: Any) -> DeployPolicyConfig:
    """A policy on summarization's metric, as PipelineConfig fills it for that task."""
    return DeployPolicyConfig(**{"metric": "rougeLsum", **settings})


def test_a_policy_without_a_metric_is_refused_by_name() -> None:
    with pytest.raises(GateError, match=r"deploy_policy\.metric is not set"):
        decide({"rougeLsum": 30.0}, None, DeployPolicyConfig())


def test_a_missing_metric_names_it_and_the_metrics_that_exist() -> None:
    with pytest.raises(GateError) as caught:
        decide({"rouge1": 40.0, "rouge2": 18.0}, None, DeployPolicyConfig(metric="rougeLsum"))
    message = str(caught.value)
    assert "'rougeLsum'" in message and "rouge1, rouge2" in message


def test_a_served_version_without_the_metric_is_named() -> None:
    with pytest.raises(GateError, match="served version summarizer@3 has no metric 'rougeLsum'"):
        decide({"rougeLsum": 30.0}, served(rouge1=40.0), rouge_policy())


def test_a_floor_on_an_unknown_metric_is_named() -> None:
    with pytest.raises(GateError, match=r"floors.*'bleu'"):
        decide({"rougeLsum": 30.0}, None, rouge_policy(floors={"bleu": 10.0}))


def test_improvement_is_reported_with_the_numbers() -> None:
    decision = decide({"rougeLsum": 31.2}, served(rougeLsum=30.8), rouge_policy())
    assert decision.served_value == 30.8 and decision.value == 31.2
    assert decision.improvement == pytest.approx(0.4)
