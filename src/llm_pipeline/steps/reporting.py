"""Turn a user's mistake inside a step into one clear line and a failed step."""

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from llm_pipeline.errors import UserError
from llm_pipeline.launch.lifetime import die_with_run
from llm_pipeline.output_files import ERROR_FILE, Step
from llm_pipeline.steps.artifacts import Arguments

R = TypeVar("R")


def reports_user_errors(
    step: Step,
) -> Callable[[Callable[[Arguments], R]], Callable[[Mapping[str, Any]], R]]:
    """Make `body(arguments)` the step's body: it takes the component's arguments as they
    come (`dict(locals())`), and on a UserError exits the step with the error's status (1;
    75 for a preemption) and one line naming `step`, not a traceback; the line also goes to
    `error.txt` in the step's folder, which the run summary repeats. In a local run the step
    stops as on a SIGTERM once the run's process is gone (`die_with_run`)."""

    def decorate(body: Callable[[Arguments], R]) -> Callable[[Mapping[str, Any]], R]:
        @functools.wraps(body)
        def run(values: Mapping[str, Any]) -> R:
            arguments = Arguments(values)
            die_with_run()
            try:
                return body(arguments)
            except UserError as exc:
                message = f"{step.display_name} failed: {exc}"
                print(f"ERROR: {message}", file=sys.stderr, flush=True)
                _keep(message, arguments)
                raise SystemExit(exc.exit_code) from None

        return run

    return decorate


def _keep(message: str, arguments: Arguments) -> None:
    folder = arguments.folder()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ERROR_FILE).write_text(message + "\n")
    except OSError:
        pass  # the message is already on stderr; a read-only folder loses nothing
