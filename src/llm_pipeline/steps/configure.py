"""The configure component's body: apply the run's parameters to the config, validate it,
resolve a `registry:` model source, and hand each step its section.

This is the first step of every run, so a bad value typed into the Vertex "Create run"
form fails here, at once, with the message `--set` would give, before any GPU starts.
"""

from pathlib import Path

from llm_pipeline.config import PipelineConfig
from llm_pipeline.config.run_parameters import RUN_PARAMETERS, apply_run_parameters
from llm_pipeline.output_files import Step
from llm_pipeline.progress import status
from llm_pipeline.registry.start import resolve_start
from llm_pipeline.steps.artifacts import Arguments
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


def runtime_location(arguments: Arguments) -> dict[str, str]:
    """The `project` and `region` arguments: where the run runs (see `with_runtime_location`)."""
    return {name: arguments.text(name) for name in ("project", "region")}


@reports_user_errors(Step.CONFIGURE)
def run_configure(arguments: Arguments) -> dict[str, str]:
    """The validated sections, in `SECTIONS` order; the full config to `resolved`.

    The arguments: `config` (the whole config as JSON), the run's parameters
    (`RUN_PARAMETERS`), `project` and `region`, and the `resolved` artifact.
    """
    parameters = arguments.subset(RUN_PARAMETERS)
    validated = with_runtime_location(
        apply_run_parameters(arguments.text("config"), parameters), runtime_location(arguments)
    )
    # Once, here: every later step then starts from the same version, even if the endpoint
    # that `@serving` follows moves during the run.
    started = resolve_start(validated)
    if started.model.started_from:
        status(f"starts from {started.model.started_from} ({started.model.source})")
    validated = started
    resolved = Path(arguments.artifact("resolved").path)
    resolved.parent.mkdir(parents=True, exist_ok=True)
    resolved.write_text(validated.model_dump_json(indent=2) + "\n")
    sections = {name: getattr(validated, name).model_dump_json() for name in SECTIONS}
    for name, value in parameters.items():
        status(f"{name} = {value!r}")
    return sections
