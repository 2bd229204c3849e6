"""KFP component: a preflight's last step, undeploying its endpoint however the run ended."""

from llm_pipeline.components.image import component


@component
def undeploy_preflight(config: str, project: str = "", region: str = "") -> None:
    """Undeploy every model from a preflight's endpoint (`<endpoint>-preflight`).

    The exit task of a preflight run (`python pipeline.py ... --preflight`): it runs when
    the other steps have ended, whether they succeeded or not, so a preflight that deployed
    leaves nothing serving and no machine billing. The endpoint itself stays, empty; its
    model versions stay registered under `<model>-preflight`.

    Args:
        config: The preflight's whole config as JSON
            (`llm_pipeline.config.preflight.preflight_config`); a config that is not a
            preflight's is refused.
        project, region: Where the run runs (the placeholders Vertex fills in), for a
            config that names no `vertex.project`.
    """
    arguments = dict(locals())
    from llm_pipeline.steps.undeploy_preflight import run_undeploy_preflight

    run_undeploy_preflight(arguments)
