"""The pipeline graph, built from a validated config.

The config is baked into the graph as constant inputs, so a compiled spec is a complete,
reviewable record of what will run; the same components run locally and on Vertex AI.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from kfp import dsl
from kfp.dsl.python_component import PythonComponent

from llm_pipeline import components
from llm_pipeline.config import PipelineConfig
from llm_pipeline.pipelines.vertex import custom_training_job

Target = Literal["local", "vertex"]


def _finetune_op(config: PipelineConfig, *, target: Target, image: str) -> Any:
    """Locally, the component itself; on Vertex, the component as a GPU custom job."""
    step: PythonComponent = components.with_image(components.finetune, image)
    if target == "local":
        return step
    return custom_training_job(step, config)


def _evaluate_on_a_gpu(task: Any, config: PipelineConfig) -> None:
    """Generation is the slow part of evaluation: give it one of the training GPU type."""
    if config.cluster.accelerator_type:
        task.set_accelerator_type(config.cluster.accelerator_type).set_accelerator_limit(1)


def _deploy_section(config: PipelineConfig, *, target: Target) -> str:
    """The `deploy` section as the steps get it; a local registry folder made absolute,
    since steps may run in another working directory than `pipeline.py`."""
    deploy = config.deploy
    if target == "local" and deploy.target == "local":
        deploy = deploy.model_copy(
            update={"registry_dir": str(Path(deploy.registry_dir).expanduser().resolve())}
        )
    return deploy.model_dump_json()


def build_pipeline(config: PipelineConfig, *, target: Target = "local") -> Callable[..., Any]:
    """A KFP pipeline function for `config`: call it under `kfp.local`, or compile it."""
    image = config.vertex.image_uri()
    download = components.with_image(components.download, image)
    preprocess = components.with_image(components.preprocess, image)
    finetune = _finetune_op(config, target=target, image=image)
    evaluate = components.with_image(components.evaluate, image)
    should_deploy = components.with_image(components.should_deploy, image)
    deploy = components.with_image(components.deploy, image)
    # Sections travel as JSON text: KFP's dict parameters cannot carry null or integers.
    sections = {
        name: getattr(config, name).model_dump_json()
        for name in ("data", "model", "train", "cluster", "evaluate", "deploy_policy", "vertex")
    }
    sections["deploy"] = _deploy_section(config, target=target)
    caching = config.vertex.enable_caching if target == "vertex" else False

    @dsl.pipeline(name=config.name, description=config.description or None)
    def pipeline() -> None:
        fetched = download(task=config.task, data=sections["data"])
        fetched.set_display_name("download").set_caching_options(caching)
        tokenized = preprocess(
            task=config.task,
            data=sections["data"],
            model=sections["model"],
            dataset=fetched.outputs["dataset"],
        )
        tokenized.set_display_name("preprocess").set_caching_options(caching)
        trained = finetune(
            task=config.task,
            model=sections["model"],
            train=sections["train"],
            cluster=sections["cluster"],
            dataset=tokenized.outputs["tokenized"],
        )
        trained.set_display_name("finetune").set_caching_options(caching)
        scored = evaluate(
            evaluate=sections["evaluate"],
            model=trained.outputs["trained_model"],
            dataset=tokenized.outputs["tokenized"],
        )
        scored.set_display_name("evaluate").set_caching_options(caching)
        if target == "vertex":
            _evaluate_on_a_gpu(scored, config)
        # Never cached: the answer depends on what the endpoint serves now.
        gate = should_deploy(
            deploy=sections["deploy"],
            policy=sections["deploy_policy"],
            vertex=sections["vertex"],
            metrics=scored.outputs["metrics"],
        )
        gate.set_display_name("should-deploy").set_caching_options(False)
        # The gate's bool is its single return value, `Output`: kfp.local resolves only
        # that name for a condition on a task output.
        with dsl.If(gate.outputs["Output"] == True, name="deploy-if-better"):  # noqa: E712
            shipped = deploy(
                deploy=sections["deploy"],
                vertex=sections["vertex"],
                data=sections["data"],
                evaluate=sections["evaluate"],
                run=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
                gate_served=gate.outputs["served_version"],
                model=trained.outputs["trained_model"],
                metrics=scored.outputs["metrics"],
                dataset=tokenized.outputs["tokenized"],
            )
            shipped.set_display_name("deploy").set_caching_options(False)

    return pipeline
