"""The evaluate component's body."""

import shutil
from pathlib import Path
from typing import Any

from llm_pipeline.config import EvaluateConfig
from llm_pipeline.evaluation.processes import evaluate_in_processes
from llm_pipeline.steps.artifacts import MetricsSink, log_metrics, save_resolved_config
from llm_pipeline.steps.reporting import reports_user_errors


@reports_user_errors
def run_evaluate(
    *,
    task: str,
    evaluate: str,
    model: Any,
    dataset: Any,
    metrics: MetricsSink,
    report: Any,
    predictions: Any,
) -> None:
    """Evaluate into the `predictions` folder; log the scores and publish the report."""
    config = EvaluateConfig.from_component(evaluate)
    result = evaluate_in_processes(
        model_dir=model.path,
        dataset_dir=dataset.path,
        config=config,
        output_dir=predictions.path,
        task=task,
    )
    save_resolved_config(
        predictions.path, evaluate=config, split=result.split, processes=str(result.processes)
    )
    log_metrics(metrics, result.metrics)
    # KFP's HTML artifact is a single file, shown inline by the Vertex and KFP UIs.
    Path(report.path).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(result.report_path, report.path)
