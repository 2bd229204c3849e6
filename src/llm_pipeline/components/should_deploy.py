"""KFP component: decide whether the new model replaces what the endpoint serves now."""

from kfp.dsl import Input, Markdown, Metrics, Output, OutputPath

from llm_pipeline.components.image import component


@component
def should_deploy(
    deploy: str,
    policy: str,
    vertex: str,
    metrics: Input[Metrics],
    evaluation_data: str,
    champion: str,
    decision: Output[Metrics],
    report: Output[Markdown],
    reason: OutputPath(str),  # type: ignore[valid-type]
    served_version: OutputPath(str),  # type: ignore[valid-type]
) -> bool:
    """Compare the new model's metrics with those of the version the endpoint serves now,
    on the same evaluation rows.

    The served version is the one with the most traffic on the endpoint (Vertex: from the
    endpoint's deployed models and traffic split; locally: the registry folder), never the
    newest or oldest registered version. Its scores are those the evaluate step gave it on
    this run's rows (`champion`), else those it was registered with if they were scored on
    the same rows and settings (`evaluation_data`); else none compare, the reason says so
    and `deploy_if_nothing_served` decides.

    Args:
        deploy: The config's `deploy` section as JSON (`DeployConfig`): target (`local` or
            `vertex`), model and endpoint names, `registry_dir` (local).
        policy: The config's `deploy_policy` section as JSON (`DeployPolicyConfig`): the
            deciding `metric`, `min_improvement` (in the metric's units), `floors` per
            metric, `override` (`auto`, `always`, `never`), `deploy_if_nothing_served`.
        vertex: The config's `vertex` section as JSON (project and region, for `vertex`).
        metrics: Output of `evaluate` (the task's metrics, `Task.metric_names`).
        evaluation_data: Output of `evaluate`: the fingerprint of its rows and settings.
        champion: Output of `evaluate`: the served version's scores on the same rows (JSON),
            or why it could not be scored.

    Outputs:
        Output: True to deploy (the pipeline's `dsl.If` runs `deploy` only then).
        decision: `deploy` (1/0), `new_<metric>`, `served_<metric>`, `improvement`.
        report: The decision and its reason as Markdown, with the numbers.
        reason: One sentence that says why, e.g. `<metric> 31.2 vs 30.8 served by version
            docstrings@3 (both scored on this run's 48 evaluation rows): +0.4 <
            min_improvement 0.5, not deploying`.
        served_version: `model@version` the endpoint served (empty: nothing).
    """
    arguments = dict(locals())
    from llm_pipeline.steps.should_deploy import run_should_deploy

    return run_should_deploy(arguments)
