"""The prediction server: Vertex AI's custom container contract over FastAPI and uvicorn.

`python -m llm_pipeline.cli.serve --model PATH` runs it; `start_server` runs it as a child
process for a `with` block (the deploy step's check); `create_app` builds the ASGI app.
Settings come from the environment (`settings.py` lists every variable).
"""

from llm_pipeline.serve.errors import ServeError
from llm_pipeline.serve.settings import Settings, load_settings, serving_env

__all__ = ["ServeError", "Settings", "create_app", "load_settings", "serving_env", "start_server"]


def __getattr__(name: str) -> object:
    # FastAPI and httpx load only for callers that start a server.
    if name == "create_app":
        from llm_pipeline.serve.app import create_app

        return create_app
    if name == "start_server":
        from llm_pipeline.serve.launch import start_server

        return start_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
