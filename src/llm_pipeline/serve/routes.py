"""The routes: health, predict (Vertex AI's contract), the page at `/`, and batching stats.

The predict route reads and checks the body itself rather than through FastAPI's automatic
validation: the size limit must apply while the body is read, before anything parses it, and
every refusal has the same shape (`{"error": "where: what"}`, status 400 for any bad field)
as Vertex AI's own prebuilt containers answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError

from llm_pipeline.config.errors import problems_from
from llm_pipeline.errors import ParameterError, json_path, load_json
from llm_pipeline.serve.page import render_page
from llm_pipeline.serve.schemas import (
    GenerationParameters,
    PredictRequest,
    json_type,
)
from llm_pipeline.serve.settings import MAX_BODY_BYTES, Settings
from llm_pipeline.tasks import InstanceError, get_task

if TYPE_CHECKING:
    from llm_pipeline.serve.batching import Batcher
    from llm_pipeline.serve.served import ModelInput, Prediction, ServedModel

#: Problems listed in one refusal; the rest are counted.
_SHOWN_PROBLEMS = 10


@dataclass
class ServerState:
    """What the routes share: settings, the model once loaded, and request counts."""

    settings: Settings
    model: ServedModel | None = None
    batcher: Batcher[GenerationParameters, ModelInput, Prediction] | None = None
    error: str | None = None
    in_flight: int = 0
    answered: int = 0
    loaded: threading.Event = field(default_factory=threading.Event)

    @property
    def ready(self) -> bool:
        """Whether predictions can be served."""
        return self.loaded.is_set() and self.batcher is not None


class Refused(Exception):
    """A request answered with a 4xx status and a message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def build_router(settings: Settings) -> APIRouter:
    """The routes at the paths `settings` names."""
    router = APIRouter()
    router.add_api_route(settings.health_route, health, methods=["GET"])
    router.add_api_route(settings.predict_route, predict, methods=["POST"])
    router.add_api_route("/", page, methods=["GET"], response_class=HTMLResponse)
    router.add_api_route("/stats", stats, methods=["GET"])
    return router


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.server
    return state


async def health(request: Request) -> JSONResponse:
    """200 once the model answers; 503 while it loads (or after it failed to)."""
    state = _state(request)
    if state.ready:
        return JSONResponse({"status": "ready"})
    if state.error is not None:
        return JSONResponse({"status": "failed", "error": state.error}, status_code=503)
    return JSONResponse({"status": "loading"}, status_code=503)


async def predict(request: Request) -> JSONResponse:
    """`{"instances": [...], "parameters": {...}}` → `{"predictions": [...]}`."""
    state = _state(request)
    try:
        body = await _read_json(request)
        parsed = _validate(body, state.settings)
    except Refused as refused:
        return JSONResponse({"error": str(refused)}, status_code=refused.status)
    if not state.ready or state.batcher is None or state.model is None:
        message = state.error or "the model is still loading; retry when health answers 200"
        return JSONResponse({"error": message}, status_code=503, headers={"Retry-After": "5"})
    parameters = parsed.parameters.over(state.settings.parameters)
    try:
        inputs = _model_inputs(state.model, parsed)
        _check_parameters(state.model, parameters)
    except Refused as refused:
        return JSONResponse({"error": str(refused)}, status_code=refused.status)
    state.in_flight += 1
    try:
        predictions = await state.batcher.submit(parameters, inputs)
    finally:
        state.in_flight -= 1
    state.answered += 1
    return JSONResponse({"predictions": predictions})


async def page(request: Request) -> HTMLResponse:
    """The served task's page: paste a text and read its summary or see its labels' scores,
    or chat with the model."""
    state = _state(request)
    model = state.model.describe() if state.model is not None else None
    return HTMLResponse(render_page(state.settings, model))


async def stats(request: Request) -> JSONResponse:
    """Batching so far: model calls and their sizes, requests in flight and answered."""
    state = _state(request)
    body: dict[str, Any] = {
        "ready": state.ready,
        "requests_in_flight": state.in_flight,
        "requests_answered": state.answered,
    }
    if state.batcher is not None:
        counts = state.batcher.stats()
        body.update(
            model_calls=counts.calls,
            instances_run=counts.inputs,
            batch_sizes={str(size): n for size, n in counts.batch_sizes.items()},
            instances_queued=counts.queued,
        )
    if state.model is not None:
        body["model"] = state.model.describe()
    return JSONResponse(body)


async def _read_json(request: Request) -> Any:
    """The body parsed as JSON, refused if it is not JSON or over Vertex's size limit."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        shown = media_type or "none"
        raise Refused(415, f"Content-Type must be application/json, got {shown}")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise Refused(413, _too_large(f"{int(declared)} bytes"))
    body = bytearray()
    async for chunk in request.stream():  # a body without Content-Length is counted too
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise Refused(413, _too_large(f"over {MAX_BODY_BYTES} bytes"))
    if not body.strip():
        raise Refused(400, 'request body is empty; send {"instances": [...]}')
    try:
        return load_json(body, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"request body is not valid JSON: {exc}") from None


def _validate(body: Any, settings: Settings) -> PredictRequest:
    if not isinstance(body, dict):
        raise Refused(
            400, f'request body must be a JSON object {{"instances": [...]}}, got {json_type(body)}'
        )
    try:
        return PredictRequest.model_validate(body, context=settings)
    except ValidationError as exc:
        allowed: dict[tuple[int | str, ...], Sequence[str]] = {
            ("parameters",): get_task(settings.task).serving_parameters
        }
        problems = problems_from(exc, PredictRequest, known_keys=allowed)
        more = len(problems) - _SHOWN_PROBLEMS
        shown = "; ".join(problems[:_SHOWN_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")
        raise Refused(400, shown) from None


def _model_inputs(model: ServedModel, request: PredictRequest) -> list[ModelInput]:
    """What the model reads for each instance; a chat the model's own chat template
    refuses is the client's to fix (400)."""
    inputs = []
    for index, instance in enumerate(request.instances):
        try:
            inputs.append(model.model_input(instance))
        except InstanceError as exc:
            where = json_path(("instances", index, *exc.where))
            raise Refused(400, f"{where}: {exc.what}") from None
    return inputs


def _check_parameters(model: ServedModel, parameters: GenerationParameters) -> None:
    """A parameter out of the loaded model's bounds (a classifier's top_k above its number
    of labels) is the client's to fix (400). The server's defaults were checked at load."""
    try:
        model.check_parameters(parameters)
    except ParameterError as exc:
        raise Refused(400, f"{json_path(('parameters', exc.name))}: {exc.what}") from None


def _too_large(size: str) -> str:
    return (
        f"request body is {size}; the limit is {MAX_BODY_BYTES} bytes (1.5 MB, Vertex AI's "
        "online prediction limit): send fewer or shorter instances per request"
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
