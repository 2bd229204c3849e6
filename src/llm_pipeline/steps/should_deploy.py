"""The should_deploy component's body: the gate against what the endpoint serves now."""

from typing import Any

from llm_pipeline.config import DeployConfig, DeployPolicyConfig, VertexConfig
from llm_pipeline.output_files import Step
from llm_pipeline.progress import status
from llm_pipeline.registry import Champion, Decision, decide, open_registry, served_scores
from llm_pipeline.steps.artifacts import Arguments, log_metrics, write_text_output
from llm_pipeline.steps.reporting import reports_user_errors


@reports_user_errors(Step.SHOULD_DEPLOY)
def run_should_deploy(arguments: Arguments) -> bool:
    """Decide, record the decision as Metrics and Markdown, and return it.

    The new model is compared with the served version's scores on the same evaluation rows:
    the evaluate step's `champion` (the served version scored on this run's rows), else the
    version's recorded scores if it was registered with this run's `evaluation_data`
    fingerprint, else nothing (`registry.gate` says what then decides).

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
    compared = served_scores(
        served,
        champion=Champion.from_json(arguments.text("champion")),
        fingerprint=arguments.text("evaluation_data").strip(),
    )
    result = decide(new_metrics, compared, policy_config)
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
    write_text_output(arguments.artifact("report").path, _markdown(result, endpoint))
    write_text_output(arguments.text("reason"), result.reason)
    write_text_output(arguments.text("served_version"), served.ref if served else "")
    return result.deploy


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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
