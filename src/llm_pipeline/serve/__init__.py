"""The prediction server: Vertex AI's custom container contract over FastAPI and uvicorn.

`python -m llm_pipeline.cli.serve --model PATH` runs it; `start_server` runs it as a child
process for a `with` block (the deploy step's check); `create_app` builds the ASGI app.
Settings come from the environment (`settings.py` lists every variable).
"""

from typing import TYPE_CHECKING

from llm_pipeline import lazy_exports
from llm_pipeline.errors import ServeError
from llm_pipeline.serve.settings import Settings, load_settings, serving_env

if TYPE_CHECKING:
    from llm_pipeline.serve.app import create_app
    from llm_pipeline.serve.server_process import start_server

__all__ = ["ServeError", "Settings", "create_app", "load_settings", "serving_env", "start_server"]

# FastAPI and httpx load only for callers that start a server.
__getattr__ = lazy_exports(
    __name__,
    {"create_app": "llm_pipeline.serve.app", "start_server": "llm_pipeline.serve.server_process"},
)
