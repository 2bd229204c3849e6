"""The evaluate component's body: the new model scored, then the gate's champion.

The champion is the version the endpoint serves, scored on this run's rows. Scores recorded
on other data cannot be compared (100 on three rows of one dataset against 9 on another), so
where the served version's files can be loaded here (a local registry) this step scores it
on the same rows with the same settings as the new model, one pass each, and the gate
compares the two. Where it cannot, the champion says why, and the gate falls back to
recorded scores of the same evaluation (`registry.gate`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from llm_pipeline.config import DeployConfig, EvaluateConfig, VertexConfig
from llm_pipeline.engines import EngineChoice
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.evaluate_model import evaluate_in_processes
from llm_pipeline.evaluation.fingerprint import evaluation_fingerprint
from llm_pipeline.models.sources import tokenization_difference
from llm_pipeline.output_files import Step
from llm_pipeline.progress import status
from llm_pipeline.registry import Champion, ModelVersion, open_registry
from llm_pipeline.registry.base import files_gone
from llm_pipeline.serve.settings import env_name
from llm_pipeline.steps.artifacts import (
    Arguments,
    log_metrics,
    save_resolved_config,
    write_text_output,
)
from llm_pipeline.steps.engine import serving_engine
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
    deploy = DeployConfig.from_component(arguments.text("deploy"))
    engine = serving_engine(deploy, model_dir, get_task(task), error=EvaluationError)
    status(f"engine: {engine.describe()} ({engine.reason})")
    result = evaluate_in_processes(
        model_dir=model_dir,
        dataset_dir=dataset_dir,
        config=config,
        output_dir=predictions.path,
        task=task,
        engine=engine,
    )
    save_resolved_config(
        predictions.path,
        evaluate=config,
        split=result.split,
        processes=str(result.processes),
        engine=engine.to_json(),
    )
    log_metrics(arguments.metrics("metrics"), result.metrics)
    # KFP's HTML artifact is a single file, shown inline by the Vertex and KFP UIs.
    report = Path(arguments.artifact("report").path)
    report.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(result.report_path, report)
    fingerprint = evaluation_fingerprint(dataset_dir, config, get_task(task))
    champion = score_champion(
        task=task,
        deploy=deploy,
        vertex=VertexConfig.from_component(arguments.text("vertex")),
        model_dir=model_dir,
        dataset_dir=dataset_dir,
        config=config,
        output_dir=Path(predictions.path) / CHAMPION_FOLDER,
    )
    write_text_output(arguments.text("evaluation_data"), fingerprint)
    write_text_output(arguments.text("champion"), champion.to_json())


def score_champion(
    *,
    task: str,
    deploy: DeployConfig,
    vertex: VertexConfig,
    model_dir: str,
    dataset_dir: str,
    config: EvaluateConfig,
    output_dir: Path,
) -> Champion:
    """The served version's scores on `dataset_dir` with `config` (as the new model in
    `model_dir` was scored), written under `output_dir`; or why there are none."""
    if deploy.target != "local":
        return Champion(note="the served model is in Vertex AI, where this step cannot load it")
    served = open_registry(deploy, vertex).served_version(deploy.endpoint_name())
    if served is None:
        return Champion()
    problem = _why_not_scorable(served, task=task, model_dir=model_dir)
    if problem is None:
        status(f"scoring the served version {served.ref} on the same rows, for the gate")
        # The served version's own scores only: the baselines are the new model's business.
        # A task whose metrics are relative to the starting model (DPO's) scores it against
        # the new model's start, so that both are measured from the same reference.
        settings = config.model_copy(update={"score_base_model": False})
        try:
            result = evaluate_in_processes(
                model_dir=served.uri,
                dataset_dir=dataset_dir,
                config=settings,
                output_dir=output_dir,
                task=task,
                start_of=model_dir,
                engine=served_engine(served),
            )
        except EvaluationError as exc:
            problem = str(exc)
        else:
            return Champion(served.ref, result.metrics)
    status(f"the served version {served.ref} cannot be scored on this run's rows: {problem}")
    return Champion(note=f"{served.ref} cannot be scored on this run's rows ({problem})")


def served_engine(served: ModelVersion) -> EngineChoice:
    """The engine a registered version is served with (its serving environment says)."""
    env = served.serving_env
    if env.get(env_name("engine")) == "ctranslate2":
        compute_type = env.get(env_name("compute_type")) or "int8"
        return EngineChoice("ctranslate2", compute_type, "it is served so")
    return EngineChoice()


def _why_not_scorable(served: ModelVersion, *, task: str, model_dir: str) -> str | None:
    """Why `served` cannot be scored on rows made for the model in `model_dir`, or None."""
    gone = files_gone(served)  # pruned or deleted: the gate goes on without its scores
    if gone is not None:
        return gone
    served_task = served.serving_env.get(env_name("task"))
    if served_task != task:
        if served_task is None:
            return "its registration does not say its task"
        return f"it is a {served_task} model, this run's is {task}"
    try:
        difference = tokenization_difference(served.uri, model_dir)
    except (OSError, ValueError) as exc:
        return f"its tokenizer cannot be loaded: {exc}"
    if difference is not None:
        return f"its tokenizer is not this run's: {difference}"
    return None
