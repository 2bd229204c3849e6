"""The finetune component's body."""

from pathlib import Path

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.output_files import STARTED_FROM_KEY, Step
from llm_pipeline.steps.artifacts import Arguments, log_metrics
from llm_pipeline.steps.reporting import reports_user_errors
from llm_pipeline.tasks import get_task
from llm_pipeline.train.job import run_finetune


@reports_user_errors(Step.FINETUNE)
def run_finetune_step(arguments: Arguments) -> None:
    """Train on this replica; the primary records the model and metrics, others exit 0."""
    task = arguments.text("task")
    get_task(task)  # an unknown task fails here, before any process starts
    logs, trained_model = arguments.artifact("logs"), arguments.artifact("trained_model")
    Path(logs.path).mkdir(parents=True, exist_ok=True)
    model = ModelConfig.from_component(arguments.text("model"))
    result = run_finetune(
        dataset_dir=arguments.artifact("dataset").path,
        output_dir=trained_model.path,
        model=model,
        train=TrainConfig.from_component(arguments.text("train")),
        cluster=ClusterConfig.from_component(arguments.text("cluster")),
        tensorboard_dir=logs.path,
        task=task,
    )
    if not result.is_primary:
        # Leaving before the KFP executor writes outputs: on Vertex only the primary replica
        # (workerpool0) may record the step's artifacts.
        print(result.message, flush=True)
        raise SystemExit(0)
    log_metrics(arguments.metrics("metrics"), result.metrics)
    trained_model.metadata.update(
        {
            "framework": "transformers",
            "nodes": result.node_count,
            "task": task,
            "zero_stage": result.zero_stage,
        }
        # The registered version it started from (configure resolved `registry:`).
        | ({STARTED_FROM_KEY: model.started_from} if model.started_from else {})
    )
