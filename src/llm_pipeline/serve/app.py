"""The FastAPI application: the model loads once, in the background, while health says 503.

Vertex AI (and the deploy step) poll the health route until it answers 200, so the server
listens at once and loads in a thread: health answers 503 while the model is copied down
and loaded, 200 once it can predict. A model that cannot be loaded is reported in one
line to `on_load_failure` (the command line prints it and exits 1) instead of leaving a
server that never becomes healthy.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from llm_pipeline.errors import ModelLoadError, ServeError, UserError, first_line
from llm_pipeline.progress import format_duration
from llm_pipeline.serve.access import AccessGuard
from llm_pipeline.serve.batching import Batcher
from llm_pipeline.serve.routes import ServerState, build_router
from llm_pipeline.serve.schemas import GenerationParameters
from llm_pipeline.serve.served import (
    ModelInput,
    Prediction,
    ServedModel,
    fetch_model,
)
from llm_pipeline.serve.settings import Settings, env_name
from llm_pipeline.tasks import get_task

logger = logging.getLogger("llm_pipeline.serve")

#: Longest a shutdown waits for the model's worker once uvicorn's own wait is over (at most
#: `shutdown_timeout_s`): every request has then been answered or cancelled, so nothing
#: queued is still wanted, and the worker may only be inside one call (its thread is a
#: daemon: the process exits without it). Kept with that wait inside Kubernetes' 30 s.
DRAIN_TIMEOUT_S = 5.0


def create_app(
    settings: Settings, *, on_load_failure: Callable[[str], None] | None = None
) -> FastAPI:
    """The server for `settings`; it starts loading the model when it starts up."""
    state = ServerState(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        download_dir = Path(tempfile.mkdtemp(prefix="llm-pipeline-serve-"))
        # A daemon thread: a shutdown during a long download must not wait for it.
        loader = threading.Thread(
            target=_load, args=(state, download_dir, on_load_failure), name="load", daemon=True
        )
        loader.start()
        try:
            yield
        finally:
            # uvicorn has waited for the requests in flight (or cancelled them at its bound);
            # close() runs whatever is still wanted before the worker stops.
            if state.batcher is not None:
                await asyncio.to_thread(state.batcher.close, DRAIN_TIMEOUT_S)
            shutil.rmtree(download_dir, ignore_errors=True)

    app = FastAPI(
        title="llm-pipeline prediction server",
        lifespan=lifespan,
        docs_url=None,  # the docs page loads its assets from a CDN; the server is offline
        redoc_url=None,
        openapi_url=None,
    )
    app.state.server = state
    app.add_middleware(AccessGuard, settings=settings)
    app.include_router(build_router(settings))
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
    return app


def load_served_model(settings: Settings, *, download_dir: Path) -> ServedModel:
    """The model `settings` names, fetched (gs:// into `download_dir`) and loaded as its
    task serves it (`Task.serving_model`). Raises ServeError (or another UserError) with a
    one-line reason."""
    folder = fetch_model(settings.model_uri, download_dir)
    task = get_task(settings.task)
    try:
        served: ServedModel = task.serving_model(settings, folder)
    except ModelLoadError as exc:
        raise ServeError(
            f"{exc} (this server serves task {task.name!r}, {env_name('task')})"
        ) from None
    return served


def _load(state: ServerState, download_dir: Path, on_failure: Callable[[str], None] | None) -> None:
    """Load the model and start the batcher; on failure record (and report) one line."""
    settings = state.settings
    started = time.monotonic()
    try:
        model = load_served_model(settings, download_dir=download_dir)
        model.warm_up()
    except UserError as exc:
        message = str(exc)
    except Exception as exc:  # anything else still ends the server with a reason
        reason = first_line(exc, with_type=True)
        message = f"could not load the model from {settings.model_uri}: {reason}"
    else:

        def run(parameters: GenerationParameters, inputs: list[ModelInput]) -> list[Prediction]:
            # Asked at each decoding step: a call whose clients have all gone ends there.
            return model.predict(parameters, inputs, should_stop=batcher.batch_abandoned)

        batcher: Batcher[GenerationParameters, ModelInput, Prediction] = Batcher(
            run,
            max_batch_size=settings.max_batch_size,
            max_wait_s=settings.max_wait_s,
            coalesce=settings.batching and settings.max_batch_size > 1,
            max_queued=settings.max_queued_instances,
        )
        batcher.start()
        state.model, state.batcher = model, batcher
        state.loaded.set()
        took = format_duration(time.monotonic() - started)
        logger.info("model loaded in %s, ready: %s", took, model.describe())
        return
    state.error = message
    if on_failure is not None:
        on_failure(message)
    else:
        logger.error("model not loaded: %s", message)


def _routes_text(request: Request) -> str:
    settings: Settings = request.app.state.server.settings
    return f"GET /, GET {settings.health_route}, POST {settings.predict_route}, GET /stats"


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """404 and 405 (and any other HTTP error) as `{"error": ...}`, like every other refusal."""
    assert isinstance(exc, StarletteHTTPException)
    route = f"{request.method} {request.url.path}"
    if exc.status_code == 404:
        message = f"no route {route}; this server answers {_routes_text(request)}"
    elif exc.status_code == 405:
        message = f"method not allowed: {route}; this server answers {_routes_text(request)}"
    else:
        message = str(exc.detail)
    return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("%s %s failed", request.method, request.url.path)
    body: dict[str, Any] = {"error": f"internal error: {first_line(exc, with_type=True)}"}
    return JSONResponse(body, status_code=500)
