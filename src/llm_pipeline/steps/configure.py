"""The configure component's body: apply the run's parameters to the config, validate it,
and hand each step its section.

This is the first step of every run, so a bad value typed into the Vertex "Create run"
form fails here, at once, with the message `--set` would give, before any GPU starts.
"""

from pathlib import Path
from typing import Any

from llm_pipeline.config import PipelineConfig
from llm_pipeline.config.run_parameters import apply_run_parameters
from llm_pipeline.progress import status
from llm_pipeline.steps.reporting import reports_user_errors

#: The sections each step receives, as JSON text (see `Section.from_component`).
SECTIONS = ("data", "model", "train", "cluster", "evaluate", "deploy_policy", "deploy", "vertex")


def with_runtime_location(config: PipelineConfig, runtime: dict[str, str]) -> PipelineConfig:
    """`config` with `vertex.project` (and then its region) taken from where the run runs,
    when the config names no project. Outside Vertex the values are KFP's unresolved
    placeholders (`{{$...}}`), and nothing changes."""
    project, region = runtime.get("project", ""), runtime.get("region", "")
    if config.vertex.project or not project or project.startswith("{{"):
        return config
    update: dict[str, str] = {"project": project}
    if region and not region.startswith("{{"):
        update["region"] = region
    return config.model_copy(update={"vertex": config.vertex.model_copy(update=update)})


@reports_user_errors
def run_configure(
    *,
    config: str,
    parameters: dict[str, Any],
    resolved: Any,
    runtime: dict[str, str] | None = None,
) -> dict[str, str]:
    """The validated sections; the full config to `resolved`."""
    validated = with_runtime_location(apply_run_parameters(config, parameters), runtime or {})
    Path(resolved.path).parent.mkdir(parents=True, exist_ok=True)
    Path(resolved.path).write_text(validated.model_dump_json(indent=2) + "\n")
    sections = {name: getattr(validated, name).model_dump_json() for name in SECTIONS}
    for name, value in parameters.items():
        status(f"{name} = {value!r}")
    return sections
