"""The finetune component's body."""

from pathlib import Path
from typing import Any

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.steps.artifacts import MetricsSink, log_metrics
from llm_pipeline.steps.reporting import reports_user_errors
from llm_pipeline.tasks import get_task
from llm_pipeline.train.job import run_finetune


@reports_user_errors
def run_finetune_step(
    *,
    task: str,
    model: str,
    train: str,
    cluster: str,
    dataset: Any,
    trained_model: Any,
    metrics: MetricsSink,
    logs: Any,
) -> None:
    """Train on this replica; the primary records the model and metrics, others exit 0."""
    get_task(task)  # an unknown task fails here, before any process starts
    Path(logs.path).mkdir(parents=True, exist_ok=True)
    result = run_finetune(
        dataset_dir=dataset.path,
        output_dir=trained_model.path,
        model=ModelConfig.from_component(model),
        train=TrainConfig.from_component(train),
        cluster=ClusterConfig.from_component(cluster),
        tensorboard_dir=logs.path,
        task=task,
    )
    if not result.is_primary:
        # Leaving before the KFP executor writes outputs: on Vertex only the primary replica
        # (workerpool0) may record the step's artifacts.
        print(result.message, flush=True)
        raise SystemExit(0)
    log_metrics(metrics, result.metrics)
    trained_model.metadata.update(
        {"framework": "transformers", "nodes": result.node_count, "task": task}
    )
