"""The settings a person may change per run, without recompiling: the pipeline's parameters.

A compiled spec carries the whole config as one constant; these few settings are also
pipeline parameters (the Vertex "Create run" form shows them with the config's values as
defaults). The first step applies them to the config and validates the result, so a bad
value fails there with the same message `--set` would give.

The cluster's shape (`cluster.node_count`, machines, GPUs) is not among them: a custom
job's worker pools are fixed when the pipeline is compiled (`llm_pipeline.pipelines.custom_jobs`
says why), so another node count is another compile (`--set cluster.node_count=4`).
"""

import json
import math
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from llm_pipeline.config.errors import ConfigError, problems_from
from llm_pipeline.config.flat_keys import set_path
from llm_pipeline.config.pipeline import PipelineConfig


@dataclass(frozen=True)
class RunParameter:
    """One pipeline parameter: the config value it sets, its KFP type, and what it is."""

    path: str
    kind: type
    description: str
    #: When true, an empty value keeps the config's (a model may come from an architecture
    #: config or two encoders, which no single string names).
    empty_keeps_config: bool = False


RUN_PARAMETERS: dict[str, RunParameter] = {
    "dataset": RunParameter("data.dataset", str, "Hub dataset id, or gs:// / local path."),
    "model_source": RunParameter(
        "model.source",
        str,
        "Checkpoint to fine-tune (hub id or path); empty keeps the config's model.",
        empty_keeps_config=True,
    ),
    "epochs": RunParameter("train.epochs", float, "Passes over the training split."),
    "learning_rate": RunParameter("train.learning_rate", float, "Peak learning rate."),
    "per_device_batch_size": RunParameter(
        "train.per_device_batch_size", int, "Training micro-batch per GPU."
    ),
    "gate_metric": RunParameter("deploy_policy.metric", str, "Metric the gate compares."),
    "min_improvement": RunParameter(
        "deploy_policy.min_improvement", float, "Deploy only if the metric gains this much."
    ),
    "deploy_override": RunParameter(
        "deploy_policy.override", str, "auto (the gate decides), always or never."
    ),
}


def _get(tree: dict[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        node = node[part]
    return node


def parameter_defaults(config: PipelineConfig) -> dict[str, Any]:
    """Each parameter's value in `config`: the defaults of the compiled pipeline."""
    tree = config.model_dump(mode="json")
    defaults: dict[str, Any] = {}
    for name, parameter in RUN_PARAMETERS.items():
        value = _get(tree, parameter.path)
        if value is None and parameter.empty_keeps_config:
            value = ""
        defaults[name] = parameter.kind(value)
    return defaults


def apply_run_parameters(config_json: str, values: dict[str, Any]) -> PipelineConfig:
    """`config_json` with the parameters' `values` applied, validated again.

    Raises ConfigError naming each bad value by its parameter and config path.
    """
    unknown = sorted(set(values) - set(RUN_PARAMETERS))
    if unknown:
        raise ConfigError([f"unknown pipeline parameter(s): {', '.join(unknown)}"])
    tree = json.loads(config_json)
    problems = []
    for name, value in values.items():
        parameter = RUN_PARAMETERS[name]
        if parameter.empty_keeps_config and value in ("", None):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{parameter.path} (parameter {name}): {value} is not a number")
            continue
        set_path(tree, parameter.path, value)
    if problems:
        raise ConfigError(problems, source="pipeline parameters")
    try:
        return PipelineConfig.model_validate(tree)
    except ValidationError as exc:
        named = {parameter.path: name for name, parameter in RUN_PARAMETERS.items()}
        raise ConfigError(
            [_name_parameter(problem, named) for problem in problems_from(exc, PipelineConfig)],
            source="pipeline parameters",
        ) from None


def _name_parameter(problem: str, named: dict[str, str]) -> str:
    """Add the parameter's name to a problem about a value a parameter set."""
    path = problem.split(":", 1)[0]
    if path in named:
        return f"{path} (parameter {named[path]}){problem[len(path) :]}"
    return problem
