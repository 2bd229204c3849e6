"""KFP component: the run's parameters applied to the config, validated, split by step."""

from typing import NamedTuple

from kfp.dsl import Artifact, Output

from llm_pipeline.components.image import component


@component
def configure(
    config: str,
    resolved: Output[Artifact],
    dataset: str,
    model_source: str,
    epochs: float,
    learning_rate: float,
    per_device_batch_size: int,
    gate_metric: str,
    min_improvement: float,
    deploy_override: str,
    project: str = "",
    region: str = "",
) -> NamedTuple(  # type: ignore[valid-type]
    "Sections",
    [
        ("data", str),
        ("model", str),
        ("train", str),
        ("cluster", str),
        ("evaluate", str),
        ("deploy_policy", str),
        ("deploy", str),
        ("vertex", str),
    ],
):
    """Apply the pipeline's parameters to the config and validate it, as `--set` would.

    The pipeline's first step: a bad value from the Vertex "Create run" form fails here,
    naming the parameter and the config key, before anything else starts.

    Args:
        config: The whole config as JSON (`llm_pipeline.config.PipelineConfig`).
        dataset, model_source, epochs, learning_rate, per_device_batch_size, gate_metric,
        min_improvement, deploy_override: the run's parameters
            (`llm_pipeline.config.run_parameters`); an empty `model_source` keeps the
            config's model.
        project, region: Where the run runs (on Vertex AI the pipeline passes the
            placeholders that Vertex fills in). They complete a
            config that names no `vertex.project` (a spec uploaded in the UI), so that
            should-deploy and deploy find the registry in the run's own project.

    Outputs:
        resolved: The validated config this run uses, as JSON.
        data, model, train, cluster, evaluate, deploy_policy, deploy, vertex: each section
            as JSON text, for the steps.
    """
    from collections import namedtuple

    from llm_pipeline.steps.configure import run_configure

    sections = run_configure(
        config=config,
        parameters={
            "dataset": dataset,
            "model_source": model_source,
            "epochs": epochs,
            "learning_rate": learning_rate,
            "per_device_batch_size": per_device_batch_size,
            "gate_metric": gate_metric,
            "min_improvement": min_improvement,
            "deploy_override": deploy_override,
        },
        resolved=resolved,
        runtime={"project": project, "region": region},
    )
    Sections = namedtuple(
        "Sections",
        [
            "data",
            "model",
            "train",
            "cluster",
            "evaluate",
            "deploy_policy",
            "deploy",
            "vertex",
        ],
    )
    return Sections(**sections)
