"""The evaluate component's body."""

import shutil
from pathlib import Path

from llm_pipeline.config import EvaluateConfig
from llm_pipeline.evaluation.processes import evaluate_in_processes
from llm_pipeline.output_files import Step
from llm_pipeline.steps.artifacts import Arguments, log_metrics, save_resolved_config
from llm_pipeline.steps.reporting import reports_user_errors


@reports_user_errors(Step.EVALUATE)
def run_evaluate(arguments: Arguments) -> None:
    """Evaluate into the `predictions` folder; log the scores and publish the report."""
    config = EvaluateConfig.from_component(arguments.text("evaluate"))
    predictions = arguments.artifact("predictions")
    result = evaluate_in_processes(
        model_dir=arguments.artifact("model").path,
        dataset_dir=arguments.artifact("dataset").path,
        config=config,
        output_dir=predictions.path,
        task=arguments.text("task"),
    )
    save_resolved_config(
        predictions.path, evaluate=config, split=result.split, processes=str(result.processes)
    )
    log_metrics(arguments.metrics("metrics"), result.metrics)
    # KFP's HTML artifact is a single file, shown inline by the Vertex and KFP UIs.
    report = Path(arguments.artifact("report").path)
    report.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(result.report_path, report)
