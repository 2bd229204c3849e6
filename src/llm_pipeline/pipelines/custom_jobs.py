"""How each step runs: on Vertex AI, finetune and evaluate as GPU custom jobs; everywhere,
display names, caching, retries and resource labels per step.

A custom job's worker pools are fixed when the pipeline is compiled, as GCPC builds them:
`create_custom_training_job_from_component` puts them in the job component's
`worker_pool_specs` *default*, each container's `--executor_input` being the placeholder
`{{$.json_escape[1]}}`, and the launcher's `--payload` argument takes that input through
`{{$.inputs.parameters['worker_pool_specs']}}`. Vertex AI fills the executor placeholder in
when it starts the launcher; GCPC's launcher (`container/v1/custom_job/launcher.py`) only
parses the payload it is given. Whether Vertex would also fill in a placeholder inside a
value another task produced at run time is documented nowhere (KFP's own backend resolves
the placeholders of a command once, in no fixed order, and does not know `json_escape` at
all), so no run-time value here carries one: the node count is the config's
`cluster.node_count`, not a run parameter.
"""

import copy
from collections.abc import Callable
from typing import Any, Literal

from kfp.dsl.python_component import PythonComponent

from llm_pipeline.config import PipelineConfig
from llm_pipeline.output_files import Step

#: Label every Vertex resource a step creates carries, so billing and logs split by step.
STEP_LABEL = "llm-pipeline-step"
#: Steps whose outputs depend only on their inputs: served from the cache when those match.
#: Holds a digest of a cached local step's input content (read by nothing but the cache key).
INPUT_DIGEST_ENV = "LLM_PIPELINE_INPUT_DIGEST"
CACHED_STEPS = (Step.DOWNLOAD, Step.PREPROCESS)
#: Steps that reach the network (hubs, GCS, the Vertex API) and are safe to run again.
#: Not finetune (it resumes from its checkpoints inside its custom job) and not deploy (a
#: second attempt would register a second version).
RETRIED_STEPS = (Step.DOWNLOAD, Step.PREPROCESS, Step.SHOULD_DEPLOY, Step.UNDEPLOY_PREFLIGHT)
RETRIES = 3


def base_output_directory(config: PipelineConfig) -> str:
    """Where the training job's AIP_* folders go ('' lets Vertex choose none)."""
    if config.cluster.base_output_directory:
        return config.cluster.base_output_directory
    if config.vertex.pipeline_root:
        return f"{config.vertex.pipeline_root.rstrip('/')}/{config.name}/finetune"
    return ""


def step_labels(config: PipelineConfig, step: Step) -> dict[str, str]:
    """The config's labels plus the step's name (Vertex label values: [a-z0-9_-])."""
    return {**config.vertex.labels, STEP_LABEL: step.display_name}


def custom_job_settings(
    config: PipelineConfig, *, step: Step = Step.FINETUNE, single_node: bool = False
) -> dict[str, Any]:
    """Keyword arguments for GCPC's `create_custom_training_job_from_component`.

    Every replica runs the component with the same command; `replica_count` becomes one
    primary pool (workerpool0) plus `node_count - 1` workers (workerpool1), fixed in the
    compiled spec (see the module's docstring).
    """
    cluster, vertex = config.cluster, config.vertex
    return {
        "display_name": f"{cluster.name_prefix}-{config.name}"
        + ("" if step is Step.FINETUNE else f"-{step.display_name}"),
        "replica_count": 1 if single_node else cluster.node_count,
        "machine_type": cluster.machine_type,
        "accelerator_type": cluster.accelerator_type or "",
        "accelerator_count": cluster.accelerator_count if cluster.accelerator_type else 0,
        "boot_disk_type": cluster.boot_disk_type,
        "boot_disk_size_gb": cluster.boot_disk_size_gb,
        "timeout": cluster.timeout,
        "restart_job_on_worker_restart": cluster.restart_job_on_worker_restart,
        # Evaluation cannot resume: a preempted Spot VM would start it over.
        "strategy": "SPOT" if cluster.spot and step is Step.FINETUNE else "STANDARD",
        "service_account": vertex.service_account or "",
        "network": vertex.network or "",
        "tensorboard": (vertex.tensorboard or "") if step is Step.FINETUNE else "",
        "base_output_directory": base_output_directory(config) if step is Step.FINETUNE else "",
        "labels": step_labels(config, step),
    }


def _custom_job(step: PythonComponent, settings: dict[str, Any]) -> Any:
    from google_cloud_pipeline_components.v1.custom_job import (
        create_custom_training_job_from_component,
    )

    return create_custom_training_job_from_component(step, **settings)


def finetune_job(step: PythonComponent, config: PipelineConfig) -> Any:
    """`step` wrapped as a Vertex custom training job shaped by `config.cluster`, its Python
    the container's main process (`executor_as_main_process`)."""
    return _custom_job(executor_as_main_process(step), custom_job_settings(config))


def evaluate_job(step: PythonComponent, config: PipelineConfig) -> Any:
    """Evaluation on one whole training node (all its GPUs; generation shards across them),
    or None when the cluster has no accelerator and a plain pipeline task will do."""
    if not config.cluster.accelerator_type:
        return None
    return _custom_job(step, custom_job_settings(config, step=Step.EVALUATE, single_node=True))


# How KFP's lightweight-component script starts the step, in its last line.
_EXECUTOR = "_KFP_RUNTIME=true python3 -m kfp.dsl.executor_main"


def executor_as_main_process(step: PythonComponent) -> PythonComponent:
    """A copy of `step` whose container's `sh -ec SCRIPT` ends in `exec env ... python3 ...`.

    KFP runs a lightweight component as `sh -ec SCRIPT`, and dash does not `exec` the
    script's last command: `sh` stays the container's PID 1 with the step as its child. PID 1
    ignores signals it has no handler for, so the SIGTERM a preempted Spot VM gets would never
    reach the step, and training could not save before the kill. With `exec`, the step's
    Python is PID 1 itself, and the finetune step's handler (`train.run`) takes the signal.
    GCPC copies this command into the worker pools it compiles.
    """
    rewritten = copy.deepcopy(step)
    command = rewritten.component_spec.implementation.container.command
    if command[:2] != ["sh", "-ec"] or len(command) < 3 or _EXECUTOR not in command[2]:
        raise ValueError(
            f"KFP's component command changed shape ({command[:3]!r}); "
            "executor_as_main_process needs updating"
        )
    command[2] = command[2].replace(_EXECUTOR, f"exec env {_EXECUTOR}", 1)
    return rewritten


def step_options(
    config: PipelineConfig,
    *,
    target: Literal["local", "vertex"],
    scheduled: bool = False,
    input_digests: dict[Step, str] | None = None,
) -> dict[Step, Callable[[Any], None]]:
    """For each step, a function that sets its display name, caching and retries.

    Caching is for download and preprocess only; a scheduled run downloads afresh, so that
    each retraining sees the newest data. Locally a step is cached only where
    `input_digests` knows the content of what it reads (`data.fingerprint`); the digest
    goes into its environment, which KFP's local cache key includes.
    """
    if target == "vertex":
        cached = set(CACHED_STEPS) if config.vertex.enable_caching else set()
    else:
        cached = set(CACHED_STEPS) & set(input_digests or {})
    if scheduled:
        cached.discard(Step.DOWNLOAD)

    def options(step: Step) -> Callable[[Any], None]:
        def apply(task: Any) -> None:
            task.set_display_name(step.display_name).set_caching_options(step in cached)
            if target == "local" and step in cached:
                task.set_env_variable(INPUT_DIGEST_ENV, (input_digests or {})[step])
            if target == "vertex" and step in RETRIED_STEPS:
                task.set_retry(num_retries=RETRIES, backoff_duration="60s", backoff_factor=2)

        return apply

    return {step: options(step) for step in Step}
