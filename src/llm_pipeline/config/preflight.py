"""A preflight: the same pipeline, images and cluster shape (nodes, GPUs, Spot) at tiny sizes,
so that a wrong image, a missing permission or quota, a bad placeholder or path fails in
minutes instead of after days of training.

`preflight_config` derives it from a config; it is the one place its settings live. A
preflight writes nothing a real run reads: its own name (so its own training-job folder and
checkpoints), its own model and endpoint, no cached step outputs either way.
"""

import json
from typing import Any

from pydantic import ValidationError

from llm_pipeline.config.errors import ConfigError, problems_from
from llm_pipeline.config.pipeline import PipelineConfig

#: Appended to the pipeline's, the model's and the endpoint's names, and to folders.
PREFLIGHT_SUFFIX = "-preflight"
#: Training examples: a few dozen, and at least one per training process.
TRAIN_EXAMPLES = 32
#: Validation and evaluation examples: a handful, and at least one per process.
EVAL_EXAMPLES = 8
#: Optimizer steps; the one checkpoint is saved at the last.
TRAIN_STEPS = 2
#: The training job's time limit: a preflight that hangs stops within this.
TIMEOUT_S = 4 * 3600


def _cap(current: int | None, wanted: int) -> int:
    """`wanted`, or the config's own cap when that is smaller already."""
    return wanted if current is None else min(current, wanted)


def _suffixed(path: str | None) -> str | None:
    return path.rstrip("/") + PREFLIGHT_SUFFIX if path else path


def preflight_config(config: PipelineConfig, *, deploy: bool = True) -> PipelineConfig:
    """`config` as its preflight runs it.

    - data: a few dozen training examples and a handful for validation and test, at least
      one per process that reads them, so every GPU does real work;
    - train: `TRAIN_STEPS` steps, evaluated and checkpointed once, at the last;
    - evaluate: a handful of examples, the same generation settings;
    - deploy: model `<model>-preflight` on endpoint `<endpoint>-preflight`, whatever the
      gate would say (`deploy_policy.override` `always`), or not at all with `deploy=False`;
    - cluster: the same machines, nodes, GPUs and Spot; a time limit of `TIMEOUT_S` at most;
      an explicit `base_output_directory` (or `train.checkpoint_dir`) gets the suffix;
    - vertex: no step taken from or left for the cache; no Experiment.

    Raises ConfigError when a derived name breaks a rule (e.g. too long).
    """
    cluster = config.cluster
    per_node = cluster.processes or (cluster.accelerator_count if cluster.accelerator_type else 1)
    ranks = cluster.node_count * max(per_node, 1)
    evaluators = config.evaluate.processes or max(per_node, 1)
    caps = config.data.max_samples
    tree = config.model_dump(mode="json")
    tree["name"] = config.name + PREFLIGHT_SUFFIX
    tree["description"] = f"Preflight of {config.name}: tiny sizes, same images and cluster."
    tree["data"]["max_samples"] = {
        **caps,
        "train": _cap(caps.get("train"), max(TRAIN_EXAMPLES, ranks)),
        "validation": _cap(caps.get("validation"), max(EVAL_EXAMPLES, ranks)),
        "test": _cap(caps.get("test"), max(EVAL_EXAMPLES, evaluators)),
    }
    tree["train"].update(
        max_steps=TRAIN_STEPS,
        save_steps=TRAIN_STEPS,
        eval_steps=TRAIN_STEPS,
        logging_steps=1,
        checkpoint_dir=_suffixed(config.train.checkpoint_dir),
    )
    tree["evaluate"]["max_samples"] = _cap(
        config.evaluate.max_samples, max(EVAL_EXAMPLES, evaluators)
    )
    tree["deploy"].update(
        model_display_name=config.deploy.model_display_name + PREFLIGHT_SUFFIX,
        endpoint_display_name=config.deploy.endpoint_name() + PREFLIGHT_SUFFIX,
    )
    tree["deploy_policy"]["override"] = "always" if deploy else "never"
    timeout = min(int(cluster.timeout.removesuffix("s")), TIMEOUT_S)
    tree["cluster"].update(
        timeout=f"{timeout}s", base_output_directory=_suffixed(cluster.base_output_directory)
    )
    tree["vertex"].update(enable_caching=False, experiment=None)
    try:
        return PipelineConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(problems_from(exc, PipelineConfig), source="the preflight") from None


def is_preflight(config: PipelineConfig) -> bool:
    """Whether `config` came from `preflight_config` (its pipeline and endpoint names say so)."""
    return config.name.endswith(PREFLIGHT_SUFFIX) and config.deploy.endpoint_name().endswith(
        PREFLIGHT_SUFFIX
    )


def empties_its_endpoint(preflight: PipelineConfig) -> bool:
    """Whether a preflight deploys to a Vertex endpoint, which its run's last step empties."""
    return preflight.deploy.target == "vertex" and preflight.deploy_policy.override == "always"


def preflight_changes(config: PipelineConfig, preflight: PipelineConfig) -> list[str]:
    """`path: before → after` for each setting the preflight changes, for `--dry-run`."""
    before, after = config.model_dump(mode="json"), preflight.model_dump(mode="json")
    changes = []
    for key, value in after.items():
        pairs: list[tuple[str, Any, Any]]
        if isinstance(value, dict):
            pairs = [(f"{key}.{k}", before[key].get(k), v) for k, v in value.items()]
        else:
            pairs = [(key, before[key], value)]
        changes += [f"{path}: {json.dumps(a)} → {json.dumps(b)}" for path, a, b in pairs if a != b]
    return changes
