"""The evaluate component's body."""

import shutil
from pathlib import Path

from llm_pipeline.config import DeployConfig, EvaluateConfig, VertexConfig
from llm_pipeline.evaluation.evaluate_model import evaluate_in_processes
from llm_pipeline.evaluation.fingerprint import evaluation_fingerprint
from llm_pipeline.output_files import Step
from llm_pipeline.steps.artifacts import (
    Arguments,
    log_metrics,
    save_resolved_config,
    write_text_output,
)
from llm_pipeline.steps.champion import score_champion
from llm_pipeline.steps.reporting import reports_user_errors
from llm_pipeline.tasks import get_task

#: The folder, inside `predictions`, with the served version's outputs on the same rows.
CHAMPION_FOLDER = "champion"


@reports_user_errors(Step.EVALUATE)
def run_evaluate(arguments: Arguments) -> None:
    """Evaluate into the `predictions` folder; log the scores and publish the report; then
    score the served version on the same rows for the gate (`champion`) and write the
    fingerprint of this evaluation (`evaluation_data`), which the deploy step registers."""
    task = arguments.text("task")
    config = EvaluateConfig.from_component(arguments.text("evaluate"))
    predictions = arguments.artifact("predictions")
    model_dir, dataset_dir = arguments.artifact("model").path, arguments.artifact("dataset").path
    result = evaluate_in_processes(
        model_dir=model_dir,
        dataset_dir=dataset_dir,
        config=config,
        output_dir=predictions.path,
        task=task,
    )
    save_resolved_config(
        predictions.path, evaluate=config, split=result.split, processes=str(result.processes)
    )
    log_metrics(arguments.metrics("metrics"), result.metrics)
    # KFP's HTML artifact is a single file, shown inline by the Vertex and KFP UIs.
    report = Path(arguments.artifact("report").path)
    report.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(result.report_path, report)
    fingerprint = evaluation_fingerprint(dataset_dir, config, get_task(task))
    champion = score_champion(
        task=task,
        deploy=DeployConfig.from_component(arguments.text("deploy")),
        vertex=VertexConfig.from_component(arguments.text("vertex")),
        model_dir=model_dir,
        dataset_dir=dataset_dir,
        config=config,
        output_dir=Path(predictions.path) / CHAMPION_FOLDER,
    )
    write_text_output(arguments.text("evaluation_data"), fingerprint)
    write_text_output(arguments.text("champion"), champion.to_json())
