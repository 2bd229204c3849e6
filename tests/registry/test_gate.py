"""The should-deploy gate, case by case: each row is a policy, a new score and what is served."""

from __future__ import annotations

from typing import Any

import pytest

from llm_pipeline.config import DeployPolicyConfig
from llm_pipeline.registry import (
    EVALUATION_DATA_LABEL,
    Champion,
    GateError,
    ModelVersion,
    Served,
    decide,
    served_scores,
)

#: Fingerprints of two evaluations (`evaluation.fingerprint`): this run's, another dataset's.
THIS_RUN, OTHER_DATA = "a" * 32, "b" * 32


def version(evaluation_data: str | None = THIS_RUN, **metrics: float) -> ModelVersion:
    """Version 3, registered with `metrics` scored on the evaluation `evaluation_data`."""
    labels = {EVALUATION_DATA_LABEL: evaluation_data} if evaluation_data else {}
    return ModelVersion(model="summarizer", version="3", uri="/m", metrics=metrics, labels=labels)


def served(**metrics: float) -> Served | None:
    """Version 3 served, scored on this run's evaluation data: its scores compare."""
    return served_scores(version(**metrics), champion=Champion(), fingerprint=THIS_RUN)


SAME = "(scored on the same evaluation rows and settings)"
CASES: list[tuple[str, dict[str, Any], dict[str, float], Served | None, bool, str]] = [
    (
        "better",
        {},
        {"rougeLsum": 31.2},
        served(rougeLsum=30.8),
        True,
        f"rougeLsum 31.2 vs 30.8 served by version summarizer@3 {SAME}: +0.4 >= min_improvement 0, "
        "deploying",
    ),
    (
        "worse",
        {},
        {"rougeLsum": 29.0},
        served(rougeLsum=30.8),
        False,
        f"rougeLsum 29 vs 30.8 served by version summarizer@3 {SAME}: -1.8 is no improvement, "
        "not deploying",
    ),
    (
        "equal",
        {},
        {"rougeLsum": 30.8},
        served(rougeLsum=30.8),
        False,
        f"rougeLsum 30.8 vs 30.8 served by version summarizer@3 {SAME}: +0 is no improvement, "
        "not deploying",
    ),
    (
        "within min_improvement",
        {"min_improvement": 0.5},
        {"rougeLsum": 31.2},
        served(rougeLsum=30.8),
        False,
        f"rougeLsum 31.2 vs 30.8 served by version summarizer@3 {SAME}: +0.4 < "
        "min_improvement 0.5, not deploying",
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
    now: Served | None,
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


# -- like with like: the served version's scores count only on the same evaluation rows --


def test_a_score_from_another_dataset_is_not_compared() -> None:
    """The issue's case: the endpoint serves a model scored 100 on three rows of the user's
    own data; this run, on the demo's data, scores 9.093. The 100 says nothing about it."""
    elsewhere = version(OTHER_DATA, rougeLsum=100.0)
    compared = served_scores(elsewhere, champion=Champion(), fingerprint=THIS_RUN)

    decision = decide({"rougeLsum": 9.093}, compared, rouge_policy())

    assert decision.deploy is True
    assert decision.reason == (
        "rougeLsum 9.093; the endpoint serves version summarizer@3, which cannot be compared "
        "with it: it was scored on other evaluation rows or settings (its recorded rougeLsum "
        "100 is not comparable): deploying"
    )
    assert decision.served is elsewhere
    assert decision.served_value is None and decision.improvement is None


def test_with_nothing_comparable_deploy_if_nothing_served_decides() -> None:
    compared = served_scores(
        version(OTHER_DATA, rougeLsum=100.0), champion=Champion(), fingerprint=THIS_RUN
    )
    decision = decide({"rougeLsum": 9.093}, compared, rouge_policy(deploy_if_nothing_served=False))
    assert decision.deploy is False
    assert decision.reason.endswith(
        "not deploying (deploy_policy.deploy_if_nothing_served is false)"
    )


def test_a_version_registered_without_its_evaluation_data_is_not_compared() -> None:
    compared = served_scores(
        version(None, rougeLsum=30.0), champion=Champion(), fingerprint=THIS_RUN
    )
    assert compared is not None and compared.metrics is None
    assert "records no evaluation data" in compared.basis


def test_the_champion_scored_on_this_runs_rows_is_what_is_compared() -> None:
    """The served version, scored by this run's evaluate step on this run's 3 rows: its
    8.5 is compared, not the 100 it was registered with."""
    recorded = version(OTHER_DATA, rougeLsum=100.0)
    champion = Champion(recorded.ref, {"rougeLsum": 8.5, "samples": 3.0})

    decision = decide(
        {"rougeLsum": 9.093},
        served_scores(recorded, champion=champion, fingerprint=THIS_RUN),
        rouge_policy(),
    )

    assert decision.deploy is True
    assert decision.reason == (
        "rougeLsum 9.093 vs 8.5 served by version summarizer@3 (both scored on this run's 3 "
        "evaluation rows): +0.593 >= min_improvement 0, deploying"
    )
    assert decision.served_value == 8.5


def test_the_champion_outranks_a_recorded_score_of_the_same_evaluation() -> None:
    recorded = version(THIS_RUN, rougeLsum=9.0)
    champion = Champion(recorded.ref, {"rougeLsum": 12.0, "samples": 3.0})
    compared = served_scores(recorded, champion=champion, fingerprint=THIS_RUN)
    assert compared is not None and compared.metrics == champion.metrics
    assert decide({"rougeLsum": 10.0}, compared, rouge_policy()).deploy is False


def test_a_champion_of_another_version_is_ignored() -> None:
    """The endpoint moved between evaluate and the gate: the champion scored a version that
    is no longer served, so it says nothing; the recorded score of the same evaluation does."""
    now = version(THIS_RUN, rougeLsum=9.0)
    stale = Champion("summarizer@2", {"rougeLsum": 1.0, "samples": 3.0})
    compared = served_scores(now, champion=stale, fingerprint=THIS_RUN)
    assert compared is not None and compared.metrics == {"rougeLsum": 9.0}
    assert compared.basis == "scored on the same evaluation rows and settings"


def test_why_the_champion_was_not_scored_is_in_the_reason() -> None:
    note = "summarizer@3 cannot be scored on this run's rows (it is a text_classification model)"
    compared = served_scores(
        version(OTHER_DATA, rougeLsum=100.0), champion=Champion(note=note), fingerprint=THIS_RUN
    )
    reason = decide({"rougeLsum": 9.0}, compared, rouge_policy()).reason
    assert f"other evaluation rows or settings, and {note}" in reason


def test_the_champion_travels_between_steps_as_text() -> None:
    champion = Champion("summarizer@3", {"rougeLsum": 8.5}, "")
    assert Champion.from_json(champion.to_json()) == champion
    assert Champion.from_json(Champion(note="why").to_json()) == Champion(note="why")
    assert Champion.from_json("") == Champion()
