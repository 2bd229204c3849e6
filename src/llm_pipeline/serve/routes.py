"""The routes: health, predict (Vertex AI's contract), the page at `/`, and batching stats.

The predict route reads and checks the body itself rather than through FastAPI's automatic
validation: the size limit must apply while the body is read, before anything parses it, and
every refusal has the same shape (`{"error": "where: what"}`, status 400 for any bad field)
as Vertex AI's own prebuilt containers answer.

Load is shed early: past `max_requests_in_flight` a request is refused (503, `Retry-After`)
before its body is read, and past `max_queued_instances` before its inputs are queued. A
request whose client leaves (mid-body, or while its inputs wait) is logged in one line and
its waiting inputs leave the queue: the model never runs for someone who is gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from llm_pipeline.config import strict_json
from llm_pipeline.config.errors import problems_from
from llm_pipeline.errors import ParameterError, json_path
from llm_pipeline.serve.access import is_trusted
from llm_pipeline.serve.batching import QueueFull
from llm_pipeline.serve.connections import BODY_TIMED_OUT, ConnectionCounts
from llm_pipeline.serve.page import render_page
from llm_pipeline.serve.schemas import (
    GenerationParameters,
    PredictRequest,
    json_type,
)
from llm_pipeline.serve.settings import MAX_BODY_BYTES, Settings
from llm_pipeline.serve.streaming import EVENT_STREAM, StreamedInput, TextSink, events
from llm_pipeline.tasks import InstanceError, get_task

if TYPE_CHECKING:
    from llm_pipeline.serve.batching import Batcher
    from llm_pipeline.serve.served import ModelInput, Prediction, ServedModel

logger = logging.getLogger("llm_pipeline.serve")

#: Problems listed in one refusal; the rest are counted.
_SHOWN_PROBLEMS = 10
#: The status logged (never sent: nobody is there) for a request whose client left.
_CLIENT_GONE = 499


@dataclass
class ServerState:
    """What the routes share: settings, the model once loaded, and request counts."""

    settings: Settings
    model: ServedModel | None = None
    batcher: Batcher[GenerationParameters, ModelInput, Prediction] | None = None
    error: str | None = None
    in_flight: int = 0
    streams: int = 0  # streamed answers still being sent (counted with in_flight)
    answered: int = 0
    refused_busy: int = 0  # 503s: too many requests in flight, or the queue full
    abandoned: int = 0  # clients that left before their answer
    connections: ConnectionCounts = field(default_factory=ConnectionCounts)
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
    """200 once the model answers; 503 while it loads (or after it failed to). Why it
    failed (which names the model's URI) only for a caller with the token, if one is set."""
    state = _state(request)
    if state.ready:
        return JSONResponse({"status": "ready"})
    if state.error is not None:
        body = {"status": "failed"}
        if is_trusted(dict(request.scope["headers"]), state.settings):
            body["error"] = state.error
        return JSONResponse(body, status_code=503)
    return JSONResponse({"status": "loading"}, status_code=503)


async def predict(request: Request) -> Response:
    """`{"instances": [...], "parameters": {...}}` → `{"predictions": [...]}`; 503 with
    `Retry-After` when too many requests are in flight."""
    state = _state(request)
    limit = state.settings.max_requests_in_flight
    if state.in_flight + state.streams >= limit:
        running = state.in_flight + state.streams
        return _busy(state, f"{running} requests are in flight (the limit is {limit})")
    state.in_flight += 1
    try:
        return await _predict(request, state)
    except ClientDisconnect:  # mid-body: nothing was accepted
        if not request.scope.get(BODY_TIMED_OUT):  # the protocol logged that one
            _log_gone(request, "mid-body; nothing was run")
        return Response(status_code=_CLIENT_GONE)
    except asyncio.CancelledError:
        # uvicorn cancels what still runs when a shutdown reaches its bound: an answer that
        # says so (another replica may take it), not a 500 and a traceback in the log.
        message = "the server shut down before this request was answered; send it again"
        headers = {"Retry-After": "1", "Connection": "close"}
        return JSONResponse({"error": message}, status_code=503, headers=headers)
    finally:
        state.in_flight -= 1


async def _predict(request: Request, state: ServerState) -> Response:
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
    if parameters.stream:
        return _stream(request, state, parameters, inputs)
    try:
        items = state.batcher.enqueue(parameters, inputs)
    except QueueFull as full:
        return _busy(state, str(full), full.retry_after_s)
    waiting: asyncio.Future[list[Prediction]] = asyncio.gather(
        *(asyncio.wrap_future(item.future) for item in items)
    )
    gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(request))
    answered, dropped = False, 0
    try:
        await asyncio.wait([waiting, gone], return_when=asyncio.FIRST_COMPLETED)
    finally:  # the client left, or this task was cancelled (a shutdown past its bound)
        gone.cancel()
        answered = waiting.done()
        if not answered:
            waiting.cancel()
            # Cancelled here, not through `waiting`: its cancel reaches them a loop turn later.
            # Running ones are marked: the model ends its call once all of them are.
            dropped = state.batcher.abandon(items)
    if not answered:
        state.abandoned += 1
        _log_gone(request, f"before its answer; {dropped} of its {len(items)} instances unrun")
        return Response(status_code=_CLIENT_GONE)
    predictions = waiting.result()
    state.answered += 1
    return JSONResponse({"predictions": predictions})


def _stream(
    request: Request, state: ServerState, parameters: GenerationParameters, inputs: list[ModelInput]
) -> Response:
    """The answer to one instance as server-sent events (`serve.streaming`)."""
    assert state.batcher is not None
    if len(inputs) != 1:
        message = (
            f"parameters.stream: a streamed answer is one instance's; this request has "
            f"{len(inputs)}: send them one per request, or without stream"
        )
        return JSONResponse({"error": message}, status_code=400)
    sink = TextSink(asyncio.get_running_loop(), parameters.stop or ())
    try:
        items = state.batcher.enqueue(parameters, [StreamedInput(str(inputs[0]), sink)])
    except QueueFull as full:
        return _busy(state, str(full), full.retry_after_s)
    batcher = state.batcher

    async def body() -> AsyncIterator[bytes]:
        state.streams += 1
        gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(request))
        finished = False
        try:
            async for chunk in events(sink, items[0].future, gone):
                yield chunk
            finished = not gone.done()
        finally:  # the stream ended, or its client left
            gone.cancel()
            state.streams -= 1
            if finished:
                state.answered += 1
            else:
                dropped = batcher.abandon(items)
                state.abandoned += 1
                _log_gone(request, f"mid-stream; {dropped} of its 1 instance unrun")

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body(), media_type=EVENT_STREAM, headers=headers)


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (its body is read: the next message says so)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _busy(state: ServerState, why: str, retry_after_s: float | None = None) -> JSONResponse:
    """503 with `Retry-After`: the server is at a limit; the client should come back."""
    state.refused_busy += 1
    if retry_after_s is None:
        retry_after_s = state.batcher.drain_s() if state.batcher is not None else 5.0
    seconds = str(max(1, math.ceil(retry_after_s)))
    message = f"the server is busy: {why}; retry in {seconds} s"
    return JSONResponse({"error": message}, status_code=503, headers={"Retry-After": seconds})


def _log_gone(request: Request, what: str) -> None:
    client = request.client
    who = f"{client.host}:{client.port}" if client else "a client"
    logger.info("%s %s from %s: the client left %s", request.method, request.url.path, who, what)


async def page(request: Request) -> HTMLResponse:
    """The served task's page: paste a text and read its summary or see its labels' scores,
    or chat with the model."""
    state = _state(request)
    model = state.model.describe() if state.model is not None else None
    return HTMLResponse(render_page(state.settings, model))


async def stats(request: Request) -> JSONResponse:
    """Batching so far: model calls and their sizes, requests in flight and answered."""
    state = _state(request)
    connections = state.connections
    body: dict[str, Any] = {
        "ready": state.ready,
        "requests_in_flight": state.in_flight + state.streams,
        "requests_answered": state.answered,
        "requests_refused_busy": state.refused_busy,
        "requests_abandoned": state.abandoned,
        "connections": {
            "open": connections.open,
            "refused": connections.refused,
            "header_timeouts": connections.header_timeouts,
            "body_timeouts": connections.body_timeouts,
        },
    }
    if state.batcher is not None:
        counts = state.batcher.stats()
        body.update(
            model_calls=counts.calls,
            instances_run=counts.inputs,
            batch_sizes={str(size): n for size, n in counts.batch_sizes.items()},
            instances_queued=counts.queued,
            instances_cancelled=counts.cancelled,
            calls_split_by_parameters=counts.split_calls,
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
        value = strict_json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"request body is not valid JSON: {exc}") from None
    # A key given twice (the last would count, where a proxy may have checked the first),
    # NaN, Infinity or 1e400: each named by its path rather than read as something else.
    if found := strict_json.problems(value):
        raise Refused(400, "; ".join(found[:5]))
    if (surrogate := _lone_surrogate(value)) is not None:
        where, char = surrogate
        name = f"{json_path(where)}: " if where else ""
        raise Refused(
            400, f"{name}holds a lone surrogate \\u{ord(char):04x}, which is not Unicode text"
        )
    return value


def _lone_surrogate(value: Any) -> tuple[tuple[str | int, ...], str] | None:
    """Where a string (or key) with an unpaired `\\ud800`-`\\udfff` escape is, and
    that character: JSON lets it through, but no tokenizer reads it."""
    pending: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while pending:
        item, where = pending.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                pending.append((key, where))
                pending.append((child, (*where, key)))
        elif isinstance(item, list):
            pending.extend((child, (*where, index)) for index, child in enumerate(item))
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return where, item[exc.start]
    return None


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
