"""The download component's body."""

from llm_pipeline.config import DataConfig
from llm_pipeline.data.download import download_dataset
from llm_pipeline.output_files import Step
from llm_pipeline.progress import status
from llm_pipeline.steps.artifacts import Arguments, log_metrics, save_resolved_config
from llm_pipeline.steps.reporting import reports_user_errors
from llm_pipeline.tasks import builtin_datasets, get_task


@reports_user_errors(Step.DOWNLOAD)
def run_download(arguments: Arguments) -> None:
    """Fetch the dataset into the `dataset` artifact and log its row counts."""
    task, dataset = arguments.text("task"), arguments.artifact("dataset")
    config = DataConfig.from_component(arguments.text("data"))
    status(f"reading {config.dataset}")
    counts = download_dataset(config, get_task(task), dataset.path, builtins=builtin_datasets())
    status("saved " + ", ".join(f"{split} {n:,} rows" for split, n in counts.items()))
    save_resolved_config(dataset.path, task=task, data=config)
    dataset.metadata.update({"rows": counts, "source": config.dataset})
    log_metrics(arguments.metrics("metrics"), {f"rows_{split}": n for split, n in counts.items()})
