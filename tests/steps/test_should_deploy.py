"""The should_deploy step against a real local registry: it compares with what is served."""

from __future__ import annotations

from pathlib import Path

import pytest
from kfp.dsl import Markdown, Metrics

from llm_pipeline import components
from llm_pipeline.config import DeployConfig, DeployPolicyConfig, VertexConfig
from llm_pipeline.registry import EVALUATION_DATA_LABEL, Champion
from llm_pipeline.registry.local import LocalRegistry

#: Fingerprints of two evaluations: the demo's rows, and a user's own data's.
DEMO_ROWS, OWN_DATA = "d" * 32, "e" * 32


def model_folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def run_gate(
    tmp_path: Path,
    registry_dir: Path,
    rouge: float,
    *,
    evaluation_data: str = DEMO_ROWS,
    champion: Champion | None = None,
    **policy: object,
) -> tuple[bool, str]:
    deploy = DeployConfig(registry_dir=str(registry_dir), model_display_name="summarizer")
    metrics = Metrics(uri=str(tmp_path / "evaluate-metrics"))
    metrics.log_metric("rougeLsum", rouge)
    metrics.log_metric("rouge1", rouge + 5)
    task = tmp_path / "should-deploy"
    decided = components.should_deploy.python_func(
        deploy=deploy.model_dump_json(),
        policy=DeployPolicyConfig(**{"metric": "rougeLsum", **policy}).model_dump_json(),  # type: ignore[arg-type]
        vertex=VertexConfig().model_dump_json(),
        metrics=metrics,
        evaluation_data=evaluation_data,
        champion=(champion or Champion()).to_json(),
        decision=Metrics(uri=str(task / "decision")),
        report=Markdown(uri=str(task / "report")),
        reason=str(task / "reason"),
        served_version=str(task / "served_version"),
    )
    return decided, (task / "reason").read_text()


def test_compares_with_the_served_version_not_the_newest(tmp_path: Path) -> None:
    registry_dir = tmp_path / "registry"
    registry = LocalRegistry(registry_dir)
    v1 = registry.register(
        model="summarizer",
        model_dir=str(model_folder(tmp_path, "a")),
        metrics={"rougeLsum": 30.0},
        labels={EVALUATION_DATA_LABEL: DEMO_ROWS},
    )
    registry.deploy(v1, "summarizer-endpoint")
    # A newer version that lost its gate: registered, never deployed, and much better.
    registry.register(
        model="summarizer",
        model_dir=str(model_folder(tmp_path, "b")),
        metrics={"rougeLsum": 45.0},
        labels={EVALUATION_DATA_LABEL: DEMO_ROWS},
    )

    decided, reason = run_gate(tmp_path, registry_dir, 31.0)

    assert decided is True
    assert reason == (
        "rougeLsum 31 vs 30 served by version summarizer@1 (scored on the same evaluation rows "
        "and settings): +1 >= min_improvement 0, deploying"
    )
    assert (tmp_path / "should-deploy" / "served_version").read_text() == "summarizer@1"
    report = (tmp_path / "should-deploy" / "report").read_text()
    assert "Deploy" in report and "summarizer@1" in report


def test_an_empty_registry_deploys_the_first_version(tmp_path: Path) -> None:
    decided, reason = run_gate(tmp_path, tmp_path / "no-registry-yet", 12.0)
    assert decided is True
    assert "serves nothing yet" in reason
    assert (tmp_path / "should-deploy" / "served_version").read_text() == ""


def test_a_missing_metric_fails_the_step_with_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        run_gate(tmp_path, tmp_path / "registry", 12.0, metric="bleu")
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "no metric 'bleu'" in err and "rougeLsum" in err
    assert "no metric 'bleu'" in (tmp_path / "should-deploy" / "error.txt").read_text()


def test_a_model_served_from_other_data_is_not_the_bar(tmp_path: Path) -> None:
    """The issue's case, through the step and a real registry: a model trained and scored
    on the user's own data (100 on three rows) is served; the demo's next run scores 9.093
    on its own rows. That 100 is not compared: the run deploys, and the reason says why."""
    registry_dir = tmp_path / "registry"
    registry = LocalRegistry(registry_dir)
    own = registry.register(
        model="summarizer",
        model_dir=str(model_folder(tmp_path, "own")),
        metrics={"rougeLsum": 100.0},
        labels={EVALUATION_DATA_LABEL: OWN_DATA},
    )
    registry.deploy(own, "summarizer-endpoint")

    decided, reason = run_gate(tmp_path, registry_dir, 9.093, evaluation_data=DEMO_ROWS)

    assert decided is True
    assert "-90.91" not in reason
    assert reason.startswith(
        "rougeLsum 9.093; the endpoint serves version summarizer@1, which cannot be compared"
    )
    assert "(its recorded rougeLsum 100 is not comparable): deploying" in reason
    # Deploy re-checks that the endpoint still serves what the gate saw.
    assert (tmp_path / "should-deploy" / "served_version").read_text() == "summarizer@1"
    decision = (tmp_path / "should-deploy" / "decision").read_text()
    assert "served_rougeLsum" not in decision and '"new_rougeLsum": 9.093' in decision


def test_the_served_version_scored_on_this_runs_rows_is_the_bar(tmp_path: Path) -> None:
    registry_dir = tmp_path / "registry"
    registry = LocalRegistry(registry_dir)
    own = registry.register(
        model="summarizer",
        model_dir=str(model_folder(tmp_path, "own")),
        metrics={"rougeLsum": 100.0},
        labels={EVALUATION_DATA_LABEL: OWN_DATA},
    )
    registry.deploy(own, "summarizer-endpoint")
    champion = Champion(own.ref, {"rougeLsum": 10.0, "samples": 48.0})

    decided, reason = run_gate(tmp_path, registry_dir, 9.093, champion=champion)

    assert decided is False
    assert reason == (
        "rougeLsum 9.093 vs 10 served by version summarizer@1 (both scored on this run's 48 "
        "evaluation rows): -0.907 is no improvement, not deploying"
    )
