"""The local runner and the run summary when the gate says no: deploy is skipped, the run
still succeeds, and the summary says why. The real should_deploy and deploy components run
under KFP's local runner, wired as the pipeline wires them, after a stand-in evaluate."""

from pathlib import Path

import pytest
from kfp import dsl
from kfp.dsl import Dataset, Metrics, Model, Output

from llm_pipeline import components
from llm_pipeline.cli.run import print_summary
from llm_pipeline.config import (
    DataConfig,
    DeployConfig,
    DeployPolicyConfig,
    EvaluateConfig,
    VertexConfig,
)
from llm_pipeline.local import run_local, step_order
from llm_pipeline.tasks import DEFAULT_TASK


@dsl.component(base_image="python:3.11")
def scored(
    metrics: Output[Metrics],
    model: Output[Model],
    dataset: Output[Dataset],
    evaluation_data: dsl.OutputPath(str),  # type: ignore[valid-type]
    champion: dsl.OutputPath(str),  # type: ignore[valid-type]
) -> None:
    """What evaluate hands the gate: metrics, the evaluation's fingerprint, no champion
    (nothing is served), and the model and data deploy would ship."""
    metrics.log_metric("rougeLsum", 21.5)
    for path, text in ((evaluation_data, "d" * 32), (champion, "")):
        with open(path, "w") as out:
            out.write(text)
    for artifact in (model, dataset):
        with open(artifact.path, "w") as out:
            out.write("never read: the gate says no")


def gated_pipeline(registry_dir: Path, override: str) -> object:
    deploy_section = DeployConfig(registry_dir=str(registry_dir)).model_dump_json()
    policy = DeployPolicyConfig(metric="rougeLsum", override=override).model_dump_json()  # type: ignore[arg-type]
    vertex = VertexConfig().model_dump_json()

    @dsl.pipeline(name="gate-says-no")
    def pipeline() -> None:
        evaluated = scored()
        gate = components.should_deploy(
            deploy=deploy_section,
            policy=policy,
            vertex=vertex,
            metrics=evaluated.outputs["metrics"],
            evaluation_data=evaluated.outputs["evaluation_data"],
            champion=evaluated.outputs["champion"],
        )
        gate.set_display_name("should-deploy").set_caching_options(False)
        with dsl.If(gate.outputs["Output"] == True, name="deploy-if-better"):  # noqa: E712
            components.deploy(
                task=DEFAULT_TASK,
                deploy=deploy_section,
                vertex=vertex,
                data=DataConfig(dataset="unused").model_dump_json(),
                evaluate=EvaluateConfig().model_dump_json(),
                run="test",
                gate_served=gate.outputs["served_version"],
                evaluation_data=evaluated.outputs["evaluation_data"],
                model=evaluated.outputs["model"],
                metrics=evaluated.outputs["metrics"],
                dataset=evaluated.outputs["dataset"],
            ).set_caching_options(False)

    return pipeline


def test_a_gate_that_says_no_skips_deploy_and_the_run_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline = gated_pipeline(tmp_path / "registry", "never")
    assert step_order(pipeline) == ["scored", "should-deploy", "deploy"]

    run = run_local(pipeline, pipeline_root=tmp_path / "runs")

    assert run.succeeded, run.steps
    status = {step.name: step.status for step in run.steps}
    assert status == {"scored": "succeeded", "should-deploy": "succeeded", "deploy": "not run"}
    gate = run.steps[1]
    assert gate.outputs["Output"] == "False"
    assert gate.metrics["deploy"] == 0
    assert not (tmp_path / "registry" / "models").exists()  # nothing was registered
    capsys.readouterr()
    print_summary(run)
    summary = capsys.readouterr().out
    assert (
        "Gate: do not deploy: rougeLsum 21.5, the endpoint serves nothing yet: "
        "deploy_policy.override is 'never', not deploying"
    ) in summary
    assert "[skip] deploy" in summary and "Pipeline succeeded (" in summary
