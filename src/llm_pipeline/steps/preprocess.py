"""The preprocess component's body."""

from typing import Any

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.progress import status
from llm_pipeline.steps.artifacts import MetricsSink, log_metrics, save_resolved_config
from llm_pipeline.steps.reporting import reports_user_errors
from llm_pipeline.tasks import get_task


@reports_user_errors
def run_preprocess(
    *,
    task: str,
    data: str,
    model: str,
    dataset: Any,
    tokenized: Any,
    metrics: MetricsSink,
) -> None:
    """Tokenize the `dataset` artifact into `tokenized` and log length statistics."""
    data_config = DataConfig.from_component(data)
    model_config = ModelConfig.from_component(model)
    status("tokenizing the dataset")
    report = preprocess_dataset(
        dataset_dir=dataset.path,
        output_dir=tokenized.path,
        data=data_config,
        model=model_config,
        task=get_task(task),
    )
    save_resolved_config(tokenized.path, task=task, data=data_config, model=model_config)
    log_metrics(metrics, report.metrics())
    status(
        "tokenized "
        + ", ".join(f"{name} {split.rows_out:,}" for name, split in report.splits.items())
    )
