"""The pipeline graph, built from a validated config.

The config travels into the graph whole, as one constant (so a compiled spec is a
complete, reviewable record of what will run), and the few settings a person may change
per run are pipeline parameters with the config's values as defaults
(`llm_pipeline.config.run_parameters`). The first step, `configure`, applies them and
hands every other step its validated section. The same components run locally and on
Vertex AI.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from kfp import dsl
from kfp.dsl.python_component import PythonComponent

from llm_pipeline import components
from llm_pipeline.components.undeploy_preflight import undeploy_preflight
from llm_pipeline.config import PipelineConfig
from llm_pipeline.config.data import packs
from llm_pipeline.config.model import REGISTRY_SCHEME
from llm_pipeline.config.preflight import empties_its_endpoint, is_preflight
from llm_pipeline.config.run_parameters import parameter_defaults
from llm_pipeline.data.fingerprint import content_digest
from llm_pipeline.fit.machines import UnknownMachine
from llm_pipeline.fit.places import training_where
from llm_pipeline.models.sources import ModelSourceError, resolve_model_path
from llm_pipeline.output_files import Step
from llm_pipeline.pipelines.custom_jobs import evaluate_job, finetune_job, step_options
from llm_pipeline.pipelines.signature import with_parameters
from llm_pipeline.registry.base import RegistryError
from llm_pipeline.registry.start import resolve_start
from llm_pipeline.storage import is_remote
from llm_pipeline.tasks import TASKS

Target = Literal["local", "vertex"]
#: Vertex AI's run-time placeholders for the run's project and region (as GCPC uses them).
PROJECT_PLACEHOLDER = "{{$.pipeline_google_cloud_project_id}}"
REGION_PLACEHOLDER = "{{$.pipeline_google_cloud_location}}"


def _config_for_steps(config: PipelineConfig, *, target: Target) -> str:
    """The config as the steps get it; a local registry folder made absolute, since steps
    may run in another working directory than `pipeline.py`; `data.packing: auto` decided
    for where training runs (preprocess, which packs, runs elsewhere and cannot tell)."""
    deploy = config.deploy
    if target == "local" and deploy.target == "local":
        deploy = deploy.model_copy(
            update={"registry_dir": str(Path(deploy.registry_dir).expanduser().resolve())}
        )
    data = config.data
    # A task that reads data.packing is one that can pack (a causal LM's).
    if data.packing == "auto" and "packing" in TASKS[config.task].data_keys:
        on_gpus = trains_on_gpus(config, target=target)
        data = data.model_copy(update={"packing": packs("auto", packable=True, on_gpus=on_gpus)})
    return config.model_copy(update={"deploy": deploy, "data": data}).model_dump_json()


def trains_on_gpus(config: PipelineConfig, *, target: Target) -> bool:
    """Whether finetune runs on GPUs: the fit check's answer (`fit.places`); a machine it
    does not know counts as none (the fit check names the problem)."""
    try:
        return training_where(config, target).device == "cuda"
    except UnknownMachine:
        return False


def local_input_digests(config: PipelineConfig) -> dict[Step, str]:
    """For download and preprocess, a digest of the content each reads beyond its arguments
    (the data source; the tokenizer), where it can be known: such a step is cached locally."""
    digests = {}
    data = content_digest(config.data.dataset)
    if data is not None:
        digests[Step.DOWNLOAD] = data
    source = config.model.tokenizer_source
    try:
        if source.startswith(REGISTRY_SCHEME):
            # The version's files, resolved as the configure step will (`@serving` too).
            source = resolve_start(config).model.tokenizer_source
        # A remote tokenizer would be copied here just to be hashed: leave it uncached.
        tokenizer = None if is_remote(source) else resolve_model_path(source)
    except (ModelSourceError, RegistryError):
        tokenizer = None  # preprocess (or configure) will say what is wrong with it
    tokenizer_digest = content_digest(tokenizer) if tokenizer and Path(tokenizer).is_dir() else None
    if tokenizer_digest is not None:
        digests[Step.PREPROCESS] = tokenizer_digest
    return digests


def build_pipeline(
    config: PipelineConfig,
    *,
    target: Target = "local",
    scheduled: bool = False,
    preflight: bool = False,
) -> Callable[..., Any]:
    """A KFP pipeline function for `config`: call it under `kfp.local`, or compile it.

    `scheduled` builds it for a schedule: each run downloads the data afresh instead of
    taking an earlier run's download from the cache. `preflight` builds a preflight's run
    on Vertex, `config` being `config.preflight.preflight_config(...)`: when it deploys, the
    steps run inside an exit handler whose exit task, `undeploy_preflight`, empties the
    preflight's endpoint however they end.
    """
    if preflight and (target != "vertex" or not is_preflight(config)):
        raise ValueError("a preflight runs on Vertex AI, built from preflight_config(config)")
    image = config.vertex.image_uri()

    def op(step: PythonComponent) -> PythonComponent:
        return components.with_image(step, image)

    vertex = target == "vertex"
    finetune: Any = finetune_job(op(components.finetune), config) if vertex else None
    finetune = finetune or op(components.finetune)
    evaluate: Any = (evaluate_job(op(components.evaluate), config) if vertex else None) or op(
        components.evaluate
    )
    digests = None if vertex else local_input_digests(config)
    options = step_options(config, target=target, scheduled=scheduled, input_digests=digests)
    config_json = _config_for_steps(config, target=target)

    # Vertex fills these in where the run runs; kfp.local knows neither.
    location = {"project": PROJECT_PLACEHOLDER, "region": REGION_PLACEHOLDER} if vertex else {}

    def steps(parameters: dict[str, Any]) -> None:
        cfg = op(components.configure)(config=config_json, **location, **parameters)
        options[Step.CONFIGURE](cfg)
        sections = cfg.outputs
        fetched = op(components.download)(task=config.task, data=sections["data"])
        options[Step.DOWNLOAD](fetched)
        tokenized = op(components.preprocess)(
            task=config.task,
            data=sections["data"],
            model=sections["model"],
            dataset=fetched.outputs["dataset"],
        )
        options[Step.PREPROCESS](tokenized)
        trained = finetune(
            task=config.task,
            model=sections["model"],
            train=sections["train"],
            cluster=sections["cluster"],
            dataset=tokenized.outputs["tokenized"],
        )
        options[Step.FINETUNE](trained)
        scored = evaluate(
            task=config.task,
            evaluate=sections["evaluate"],
            deploy=sections["deploy"],
            vertex=sections["vertex"],
            model=trained.outputs["trained_model"],
            dataset=tokenized.outputs["tokenized"],
        )
        options[Step.EVALUATE](scored)
        # The answer depends on what the endpoint serves now: never from the cache.
        gate = op(components.should_deploy)(
            deploy=sections["deploy"],
            policy=sections["deploy_policy"],
            vertex=sections["vertex"],
            metrics=scored.outputs["metrics"],
            evaluation_data=scored.outputs["evaluation_data"],
            champion=scored.outputs["champion"],
        )
        options[Step.SHOULD_DEPLOY](gate)
        # The gate's bool is its single return value, `Output`: kfp.local resolves only
        # that name for a condition on a task output.
        with dsl.If(gate.outputs["Output"] == True, name="deploy-if-better"):  # noqa: E712
            shipped = op(components.deploy)(
                task=config.task,
                deploy=sections["deploy"],
                vertex=sections["vertex"],
                data=sections["data"],
                evaluate=sections["evaluate"],
                run=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
                gate_served=gate.outputs["served_version"],
                evaluation_data=scored.outputs["evaluation_data"],
                model=trained.outputs["trained_model"],
                metrics=scored.outputs["metrics"],
                dataset=tokenized.outputs["tokenized"],
            )
            options[Step.DEPLOY](shipped)

    def pipeline(**parameters: Any) -> None:
        if not (preflight and empties_its_endpoint(config)):
            steps(parameters)
            return
        cleanup = op(undeploy_preflight)(config=config_json, **location)
        options[Step.UNDEPLOY_PREFLIGHT](cleanup)
        with dsl.ExitHandler(cleanup, name="preflight"):
            steps(parameters)

    return dsl.pipeline(
        name=config.name,
        description=config.description or None,
        pipeline_root=(config.vertex.pipeline_root or None) if vertex else None,
    )(with_parameters(pipeline, parameter_defaults(config)))
