"""The preprocess component's body."""

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.output_files import Step
from llm_pipeline.progress import status
from llm_pipeline.steps.artifacts import Arguments, log_metrics, save_resolved_config
from llm_pipeline.steps.reporting import reports_user_errors
from llm_pipeline.tasks import get_task


@reports_user_errors(Step.PREPROCESS)
def run_preprocess(arguments: Arguments) -> None:
    """Tokenize the `dataset` artifact into `tokenized` and log length statistics."""
    task, tokenized = arguments.text("task"), arguments.artifact("tokenized")
    data_config = DataConfig.from_component(arguments.text("data"))
    model_config = ModelConfig.from_component(arguments.text("model"))
    status("tokenizing the dataset")
    report = preprocess_dataset(
        dataset_dir=arguments.artifact("dataset").path,
        output_dir=tokenized.path,
        data=data_config,
        model=model_config,
        task=get_task(task),
    )
    save_resolved_config(tokenized.path, task=task, data=data_config, model=model_config)
    log_metrics(arguments.metrics("metrics"), report.metrics())
    status(
        "tokenized "
        + ", ".join(f"{name} {split.rows_out:,}" for name, split in report.splits.items())
    )
