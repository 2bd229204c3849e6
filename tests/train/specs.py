"""A finetune worker's spec for tests of what the worker reads from it before anything runs
(the model it builds, the adapters' size): its paths are never opened."""

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.tasks import DEFAULT_TASK
from llm_pipeline.train.spec import WorkerSpec


def unrun_spec(model: ModelConfig, train: TrainConfig, task: str = DEFAULT_TASK) -> WorkerSpec:
    """One process on one node, with `model`, `train` and `task`; no folder is real."""
    return WorkerSpec(
        dataset_dir="unused",
        output_dir="unused",
        model=model,
        train=train,
        checkpoint_root="unused",
        tensorboard_dir=None,
        tensorboard_mirror=None,
        work_dir="unused",
        node_count=1,
        procs_per_node=1,
        task=task,
    )
