"""The undeploy_preflight component's body: a preflight's run ends with its endpoint serving
nothing, however the steps before went, so that a smoke test leaves no machine billing."""

from llm_pipeline.config import PipelineConfig
from llm_pipeline.config.preflight import is_preflight
from llm_pipeline.errors import UserError
from llm_pipeline.output_files import Step
from llm_pipeline.progress import status
from llm_pipeline.registry import open_registry
from llm_pipeline.registry.vertex import VertexRegistry
from llm_pipeline.steps.artifacts import Arguments
from llm_pipeline.steps.configure import runtime_location, with_runtime_location
from llm_pipeline.steps.reporting import reports_user_errors


@reports_user_errors(Step.UNDEPLOY_PREFLIGHT)
def run_undeploy_preflight(arguments: Arguments) -> list[str]:
    """Undeploy every model from the preflight `config`'s endpoint; `model@version` of each.

    Refuses a config that is not a preflight's, so that it can never empty a real endpoint.
    """
    preflight = with_runtime_location(
        PipelineConfig.model_validate_json(arguments.text("config")), runtime_location(arguments)
    )
    endpoint = preflight.deploy.endpoint_name()
    if not is_preflight(preflight):
        raise UserError(
            f"undeploy_preflight empties only a preflight's endpoint; {endpoint!r} is not one"
        )
    registry = open_registry(preflight.deploy, preflight.vertex)
    if not isinstance(registry, VertexRegistry):
        raise UserError("undeploy_preflight undeploys from Vertex AI: deploy.target is local")
    retired = [version.ref for version in registry.undeploy_all(endpoint)]
    status(f"{endpoint} serves nothing now (undeployed: {', '.join(retired) or 'none'})")
    return retired
