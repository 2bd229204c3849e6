"""The deploy component's body: register, bring up, check, move traffic, retire.

Locally "bring up and check" is the real prediction server started on a free loopback port
with the new version, asked for its health and for predictions on evaluation documents;
on Vertex it is the endpoint itself (`VertexRegistry.deploy`). Either way traffic moves
only after the new version has answered.
"""

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from llm_pipeline.config import DataConfig, DeployConfig, EvaluateConfig, VertexConfig
from llm_pipeline.engines import EngineChoice
from llm_pipeline.engines.ctranslate2_form import ensure_form
from llm_pipeline.errors import ServeError
from llm_pipeline.evaluation.examples import load_serving_examples
from llm_pipeline.output_files import STARTED_FROM_KEY, Step
from llm_pipeline.progress import format_duration, status
from llm_pipeline.registry import (
    EVALUATION_DATA_LABEL,
    DeployError,
    DeployOutcome,
    ModelVersion,
    Registry,
    VersionCheck,
    ensure_still_served,
    open_registry,
    prediction_text,
)
from llm_pipeline.serve.schemas import GenerationParameters
from llm_pipeline.serve.server_process import start_server
from llm_pipeline.serve.settings import serving_env
from llm_pipeline.steps.artifacts import Arguments, log_metrics, write_text_output
from llm_pipeline.steps.engine import serving_engine
from llm_pipeline.steps.reporting import reports_user_errors
from llm_pipeline.storage import check_output_complete
from llm_pipeline.tasks import Task, get_task


@reports_user_errors(Step.DEPLOY)
def run_deploy(arguments: Arguments) -> None:
    """Ship the `model` artifact; `version` and `endpoint` are paths of the text outputs."""
    # The server's health polls would each log a line at INFO.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    task, gate_served = arguments.text("task"), arguments.text("gate_served")
    model, dataset = arguments.artifact("model"), arguments.artifact("dataset")
    deploy_config = DeployConfig.from_component(arguments.text("deploy"))
    data_config = DataConfig.from_component(arguments.text("data"))
    evaluate = EvaluateConfig.from_component(arguments.text("evaluate"))
    check_output_complete(model.path, made_by=Step.FINETUNE, error=DeployError)
    engine = shipped_engine(deploy_config, model.path, get_task(task))
    env = serving_env(
        task=task,
        prefix=data_config.prefix,
        # Each task reads its own input limit; the config refuses the other task's.
        max_input_tokens=data_config.max_source_length or data_config.max_length,
        chat_template=data_config.chat_template,
        parameters=generation_defaults(evaluate, task=task),
        engine=engine.engine,
        compute_type=engine.compute_type,
    )
    registry = open_registry(
        deploy_config,
        VertexConfig.from_component(arguments.text("vertex")),
        check=local_server_check(env, timeout_s=deploy_config.health_timeout_s),
    )
    endpoint_name = deploy_config.endpoint_name()
    # Checked now, before a version is registered for nothing, and again by the registry
    # just before traffic moves.
    ensure_still_served(registry.endpoint(endpoint_name), gate_served)
    # Held-out inputs as a client sends them (a chat task's turns, not its rendered prompt).
    probe = load_serving_examples(dataset.path, deploy_config.probe_instances, get_task(task))
    registered = registry.register(
        model=deploy_config.model_display_name,
        model_dir=model.path if deploy_config.target == "local" else model.uri,
        metrics={
            k: float(v)
            for k, v in dict(arguments.artifact("metrics").metadata).items()
            if _is_number(v)
        },
        run=arguments.text("run"),
        labels={
            EVALUATION_DATA_LABEL: arguments.text("evaluation_data").strip(),
            **start_labels(registry, model.metadata),
        },
        config={
            "data": data_config.model_dump(mode="json"),
            "deploy": deploy_config.model_dump(mode="json"),
        },
        serving_env=env,
    )
    status(f"registered {registered.ref} ({registered.uri})")
    outcome = registry.deploy(
        registered,
        endpoint_name,
        traffic_percent=deploy_config.traffic_percent,
        probe=probe,
        expect_served=gate_served,
    )
    summary = _summary(outcome, endpoint_name)
    status(summary)
    log_metrics(
        arguments.metrics("deployment"),
        {"version": _as_number(registered.version), "traffic": _traffic(outcome)},
    )
    write_text_output(arguments.artifact("report").path, _markdown(outcome, endpoint_name, probe))
    write_text_output(arguments.text("version"), registered.ref)
    write_text_output(arguments.text("endpoint"), endpoint_name)


def shipped_engine(deploy: DeployConfig, model_dir: str, task: Task) -> EngineChoice:
    """The engine the endpoint serves the model with; its form made (or found, the evaluate
    step made it) in the model folder, so that it is registered with the version."""
    engine = serving_engine(deploy, model_dir, task, error=DeployError)
    status(f"engine: {engine.describe()} ({engine.reason})")
    if engine.engine == "ctranslate2" and engine.compute_type is not None:
        form = ensure_form(model_dir, engine.compute_type, error=DeployError)
        status(f"its CTranslate2 {engine.compute_type} form, checked: {form}")
    return engine


def start_labels(registry: Registry, metadata: Mapping[str, Any]) -> dict[str, str]:
    """The labels recording the registered version the model was trained from, as the
    finetune step wrote it into the model's metadata (`started_from`); none otherwise."""
    started_from = metadata.get(STARTED_FROM_KEY)
    return registry.start_labels(str(started_from)) if started_from else {}


def generation_defaults(evaluate: EvaluateConfig, *, task: str) -> dict[str, Any]:
    """The evaluation's generation settings that the server takes as its defaults, among
    those the task's requests may set: the endpoint then generates as the model was scored
    (unset ones keep the model's own)."""
    names = set(GenerationParameters.model_fields) & set(get_task(task).serving_parameters)
    chosen = evaluate.model_dump(include=names, exclude_none=True)
    # The server samples exactly when its temperature is above 0: as the evaluation did.
    if not evaluate.do_sample:
        chosen.pop("temperature", None)
        chosen.pop("top_p", None)
    elif "temperature" in names:
        chosen.setdefault("temperature", 1.0)  # transformers' default when sampling
    return chosen


def local_server_check(env: dict[str, str], *, timeout_s: float) -> VersionCheck:
    """A check that starts the real prediction server on the version and asks it."""

    def check(version: ModelVersion, probe: Sequence[Any]) -> str:
        # The model's load is most of the step: say what the wait is for, and its limit.
        status(
            f"starting the prediction server on {version.ref} to check it: its health route "
            f"(up to {format_duration(timeout_s)}), then {len(probe)} probe prediction(s)"
        )
        try:
            with start_server(version.uri, env=env, timeout_s=timeout_s) as server:
                predictions = server.predict(list(probe)) if probe else []
        except ServeError as exc:
            raise DeployError(f"version {version.ref} failed its check: {exc}") from None
        # A prediction is a text or an object (labels with scores), whatever the task.
        answers = [prediction_text(prediction) for prediction in predictions]
        empty = sum(not answer.strip() for answer in answers)
        if probe and (len(answers) != len(probe) or empty):
            raise DeployError(
                f"version {version.ref} failed its check: {len(probe)} probe instances got "
                f"{len(answers)} answers, {empty} of them empty"
            )
        return answers[0] if answers else ""

    return check


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_number(version: str) -> float | None:
    try:
        return float(version)
    except ValueError:
        return None


def _traffic(outcome: DeployOutcome) -> int:
    for deployed in outcome.endpoint.deployed:
        if deployed.version.ref == outcome.version.ref:
            return deployed.traffic
    return 0


def _summary(outcome: DeployOutcome, endpoint: str) -> str:
    before = outcome.previous.ref if outcome.previous else "nothing"
    retired = ", ".join(v.ref for v in outcome.retired) or "none"
    return (
        f"{endpoint} serves {outcome.version.ref} with {_traffic(outcome)}% of traffic "
        f"(before: {before}; retired: {retired})"
    )


def _markdown(outcome: DeployOutcome, endpoint: str, probe: Sequence[Any]) -> str:
    rows = "\n".join(
        f"| {d.version.ref} | {d.traffic}% | {d.version.uri} |" for d in outcome.endpoint.deployed
    )
    first = (probe[0] if isinstance(probe[0], str) else json.dumps(probe[0])) if probe else ""
    shown = first[:300] + ("…" if len(first) > 300 else "")
    return (
        f"# deploy: {outcome.version.ref} on `{endpoint}`\n\n{_summary(outcome, endpoint)}\n\n"
        f"| version | traffic | files |\n|---|---|---|\n{rows}\n\n"
        f"**Probe instance:** {shown}\n\n**Prediction:** {outcome.prediction}\n"
    )
