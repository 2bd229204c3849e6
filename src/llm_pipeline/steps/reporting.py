"""Turn a user's mistake inside a step into one clear line and a failed step."""

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from llm_pipeline.errors import UserError
from llm_pipeline.output_files import ERROR_FILE

P = ParamSpec("P")
R = TypeVar("R")


def _task_dir(kwargs: dict[str, Any]) -> Path | None:
    """The step's own folder: that of its last artifact argument. Steps take their inputs
    first and their outputs last, and an input's folder belongs to the step that made it."""
    for value in reversed(kwargs.values()):
        path = getattr(value, "path", None)
        if isinstance(path, str) and path:
            return Path(path).parent
    return None


def reports_user_errors(step: Callable[P, R]) -> Callable[P, R]:
    """Exit the step with the error's status (1; 75 for a preemption) and the message, not a
    traceback, on a UserError."""

    @functools.wraps(step)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return step(*args, **kwargs)
        except UserError as exc:
            message = f"{step.__name__.removeprefix('run_')} failed: {exc}"
            print(f"ERROR: {message}", file=sys.stderr, flush=True)
            folder = _task_dir(kwargs)
            if folder is not None:
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / ERROR_FILE).write_text(message + "\n")
                except OSError:
                    pass  # the message is already on stderr; a read-only folder loses nothing
            raise SystemExit(exc.exit_code) from None

    return wrapper
