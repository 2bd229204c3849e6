"""`python -m llm_pipeline.cli.serve --model PATH [--port P] [--host H]`: run the prediction
server (`pipeline.py serve --endpoint NAME` runs it for what a local endpoint serves).

This is also the serving images' command: with no flags it reads Vertex AI's `AIP_*`
variables. Exit codes: 0 after a shutdown that was asked for, 1 when the model cannot be
loaded or the port cannot be opened (one line on stderr says why), 2 for bad settings.
SIGTERM stops accepting connections, closes those whose request is still arriving, finishes
the requests in flight within `LLM_PIPELINE_SERVE_SHUTDOWN_TIMEOUT_S` (20 s; those still
running then are cancelled), then exits.

It listens on 127.0.0.1 unless `--host` says otherwise or `AIP_HTTP_PORT` is set (Vertex AI
sets it: in a container the port is reached from outside, so it listens on 0.0.0.0).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from llm_pipeline.errors import ServeError
from llm_pipeline.serve.settings import Settings, env_name, load_settings

if TYPE_CHECKING:
    import uvicorn

EXAMPLES = """\
examples:
  python -m llm_pipeline.cli.serve --model my-model --port 8080
      serve a fine-tuned model folder (a run's finetune output, a registered version's)
  python -m llm_pipeline.cli.serve --model gs://my-bucket/runs/model --host 127.0.0.1
      a folder in Cloud Storage, on loopback only
  python -m llm_pipeline.cli.serve --model my-model --engine ctranslate2 --compute-type int8
      served by CTranslate2 in int8 (a T5, BART, Llama, Qwen, Gemma, ... model)
  python -m llm_pipeline.cli.serve
      as the serving image runs it: everything from Vertex AI's AIP_* variables
"""


def build_parser() -> argparse.ArgumentParser:
    """The command line; the environment (see settings.py) sets everything else."""
    parser = argparse.ArgumentParser(
        prog="python -m llm_pipeline.cli.serve",
        description="Serve a fine-tuned model folder over HTTP, following Vertex AI's custom "
        "container contract (POST {instances, parameters} -> {predictions}), for the task "
        f"{env_name('task')} names. A page at / tries the model on what you type.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        help=f"Model folder: local path or gs://bucket/folder (overrides {env_name('model_uri')}).",
    )
    parser.add_argument(
        "--port", type=int, help=f"Port to listen on (overrides {env_name('port')}; default 8080)."
    )
    parser.add_argument(
        "--host",
        default=None,
        help="Address to listen on (default 127.0.0.1; 0.0.0.0 where AIP_HTTP_PORT is set, "
        "as in a container).",
    )
    parser.add_argument(
        "--engine",
        choices=("transformers", "ctranslate2"),
        help=f"What generates (overrides {env_name('engine')}; default transformers, or what "
        "the deploy step registered): ctranslate2 converts the folder once, into its engine/.",
    )
    parser.add_argument(
        "--compute-type",
        help=f"CTranslate2's precision, e.g. int8 or float32 (overrides "
        f"{env_name('compute_type')}; default int8).",
    )
    parser.add_argument(
        "--no-access-log", action="store_true", help="Do not log every request (benchmarks)."
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until it is stopped; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(
            os.environ,
            model_uri=args.model,
            port=args.port,
            host=args.host,
            engine=args.engine,
            compute_type=args.compute_type,
        )
    except ServeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    taken = port_taken(settings.host, settings.port)
    if taken is not None:  # said before the model loads, not after, in uvicorn's words
        print(f"error: {taken}", file=sys.stderr)
        return 1
    _configure_logging(health_route=settings.health_route)
    failures: list[str] = []

    def stop(message: str) -> None:
        failures.append(message)
        print(f"error: {message}", file=sys.stderr, flush=True)
        server.should_exit = True  # uvicorn's loop notices within 0.1 s

    server = build_server(settings, on_load_failure=stop, access_log=not args.no_access_log)
    _log_settings(settings)
    try:
        server.run()
    except KeyboardInterrupt:  # a second Ctrl-C forces the exit
        return 130
    except SystemExit as exc:  # uvicorn exits this way when it cannot bind the port
        return exc.code if isinstance(exc.code, int) else 1
    if failures or not server.started:
        return 1
    return 0


def port_taken(host: str, port: int) -> str | None:
    """Why the server cannot listen on `host`:`port` (in use, say), or None when it can: a
    bind tried and released at once, with the option uvicorn binds with."""
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return f"cannot listen on {host}:{port}: {reason.lower()} (give another with --port)"
    return None


def build_server(
    settings: Settings,
    *,
    on_load_failure: Callable[[str], None] | None = None,
    access_log: bool = True,
) -> uvicorn.Server:
    """The uvicorn server `main` runs: the app, its connection limits and its shutdown bound
    (tests run it in a thread; `server.should_exit = True` is what SIGTERM does)."""
    import uvicorn

    from llm_pipeline.serve.app import create_app
    from llm_pipeline.serve.connections import ConnectionLimits, guarded_protocol

    app = create_app(settings, on_load_failure=on_load_failure)
    limits = ConnectionLimits(
        max_connections=settings.max_connections,
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
    )
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=guarded_protocol(limits, app.state.server.connections),
        access_log=access_log,
        log_level="info",
        timeout_graceful_shutdown=settings.shutdown_timeout_s,
    )
    return uvicorn.Server(config)


class _OneLine(logging.Formatter):
    """Other libraries' log records without their tracebacks (gcsfs logs one per retry)."""

    def formatException(self, ei: Any) -> str:
        return ""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_text = ""
        return super().format(record).rstrip()


def _configure_logging(*, health_route: str) -> None:
    """The server's own lines at INFO; other libraries' warnings, one line each; no health
    probes in the access log and no progress bar while weights load: Vertex AI and
    Kubernetes probe the health route every few seconds for as long as the server runs, and
    a bar's redraws are lines of their own in Cloud Logging. The server says itself when the
    model is loaded, and why not when it cannot be."""
    own = logging.getLogger("llm_pipeline.serve")
    if not own.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        own.addHandler(handler)
    own.setLevel(logging.INFO)
    own.propagate = False
    root = logging.getLogger()
    if not root.handlers:
        others = logging.StreamHandler(sys.stderr)
        others.setFormatter(_OneLine("%(levelname)s:     %(name)s: %(message)s"))
        root.addHandler(others)
    logging.getLogger("uvicorn.access").addFilter(_NotRoute(health_route))
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


class _NotRoute(logging.Filter):
    """Drop uvicorn's access lines for one route (its record's args: client, method, path
    with query, HTTP version, status)."""

    def __init__(self, route: str) -> None:
        super().__init__()
        self.route = route

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            return args[2].split("?", 1)[0] != self.route
        return True


def _log_settings(settings: Settings) -> None:
    shown = settings.model_dump(exclude={"parameters", "token"})
    shown["parameters"] = settings.parameters.model_dump(exclude_none=True)
    shown["token"] = "set" if settings.token is not None else "unset"  # never its value
    logging.getLogger("llm_pipeline.serve").info("settings: %s", shown)


if __name__ == "__main__":
    sys.exit(main())
