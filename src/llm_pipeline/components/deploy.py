"""KFP component: register the model, bring it up, check it, and move traffic to it."""

from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output, OutputPath

from llm_pipeline.components.image import component


@component
def deploy(
    task: str,
    deploy: str,
    vertex: str,
    data: str,
    evaluate: str,
    run: str,
    gate_served: str,
    evaluation_data: str,
    model: Input[Model],
    metrics: Input[Metrics],
    dataset: Input[Dataset],
    report: Output[Markdown],
    deployment: Output[Metrics],
    version: OutputPath(str),  # type: ignore[valid-type]
    endpoint: OutputPath(str),  # type: ignore[valid-type]
):
    """Register a new version, check it serves, then move traffic and retire the old one.

    Locally the real prediction server starts on a free loopback port with the new version;
    its health route must answer and it must answer evaluation inputs before the
    endpoint points at it. On Vertex the version is uploaded under the parent model and
    deployed to the endpoint with a traffic split, probed with a prediction, and the old
    version is undeployed only once it has no traffic. A failed check leaves traffic where
    it was and fails the step with the reason.

    Args:
        task: The config's `task`: the server loads the model of the kind that task trains
            and takes the instances and parameters it defines.
        deploy: The config's `deploy` section as JSON (`DeployConfig`): target, names,
            serving image and machine, replicas, `traffic_percent` (100, or a canary share),
            `health_timeout_s`, `probe_instances`.
        vertex: The config's `vertex` section as JSON (project, region).
        data: The config's `data` section as JSON: the serving container gets what the task
            reads inputs with (`prefix` and `max_source_length`, or `chat_template` and
            `max_length`), so it reads them as training did.
        evaluate: The config's `evaluate` section as JSON: its generation settings
            (`max_new_tokens`, `num_beams`, ...) become the server's defaults, so the
            endpoint generates as the evaluated model did.
        run: The pipeline run's name, recorded with the version.
        gate_served: `model@version` the gate compared with; if the endpoint serves
            something else now, another run deployed in between and this step stops.
        evaluation_data: Output of `evaluate`: the fingerprint of the rows and settings the
            metrics were scored on, registered with the version (label `evaluation_data`)
            so that a later gate compares recorded scores only of the same evaluation.
        model: Output of `finetune`.
        metrics: Output of `evaluate`, stored with the version (Vertex: as labels).
        dataset: Output of `preprocess`; its evaluation documents are the probe requests.

    Outputs:
        report: What was registered and what the endpoint serves now, as Markdown.
        deployment: `version` (number) and `traffic` (percent the new version takes).
        version: `model@version` registered.
        endpoint: The endpoint's name.
    """
    arguments = dict(locals())
    from llm_pipeline.steps.deploy import run_deploy

    run_deploy(arguments)
