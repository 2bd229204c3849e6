"""The should_deploy component's body: the gate against what the endpoint serves now."""

from pathlib import Path
from typing import Any

from llm_pipeline.config import DeployConfig, DeployPolicyConfig, VertexConfig
from llm_pipeline.output_files import Step
from llm_pipeline.progress import status
from llm_pipeline.registry import Decision, open_registry
from llm_pipeline.registry.gate import decide
from llm_pipeline.steps.artifacts import Arguments, log_metrics
from llm_pipeline.steps.reporting import reports_user_errors


@reports_user_errors(Step.SHOULD_DEPLOY)
def run_should_deploy(arguments: Arguments) -> bool:
    """Decide, record the decision as Metrics and Markdown, and return it.

    `reason` and `served_version` are the paths of the step's text outputs: the sentence
    that says why, and `model@version` of what the endpoint served (empty: nothing), which
    the deploy step re-checks before it moves traffic.
    """
    deploy_config = DeployConfig.from_component(arguments.text("deploy"))
    policy_config = DeployPolicyConfig.from_component(arguments.text("policy"))
    vertex = VertexConfig.from_component(arguments.text("vertex"))
    registry = open_registry(deploy_config, vertex)
    endpoint = deploy_config.endpoint_name()
    served = registry.served_version(endpoint)
    metrics = arguments.artifact("metrics").metadata
    new_metrics = {k: float(v) for k, v in dict(metrics).items() if _is_number(v)}
    result = decide(new_metrics, served, policy_config)
    status(result.reason)
    log_metrics(
        arguments.metrics("decision"),
        {
            "deploy": int(result.deploy),
            f"new_{result.metric}": result.value,
            f"served_{result.metric}": result.served_value,
            "improvement": result.improvement,
        },
    )
    _write_text(arguments.artifact("report").path, _markdown(result, endpoint))
    _write_text(arguments.text("reason"), result.reason)
    _write_text(arguments.text("served_version"), served.ref if served else "")
    return result.deploy


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _write_text(path: str, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text, encoding="utf-8")


def _markdown(result: Decision, endpoint: str) -> str:
    verdict = "**Deploy**" if result.deploy else "**Do not deploy**"
    served = result.served.ref if result.served else "nothing"
    served_value = "—" if result.served_value is None else f"{result.served_value:.4g}"
    improvement = "—" if result.improvement is None else f"{result.improvement:+.4g}"
    return (
        f"# should_deploy: {verdict}\n\n{result.reason}\n\n"
        f"| | {result.metric} |\n|---|---|\n"
        f"| new model | {result.value:.4g} |\n"
        f"| served by `{endpoint}` ({served}) | {served_value} |\n"
        f"| improvement | {improvement} |\n"
    )
