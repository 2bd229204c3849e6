"""Give the pipeline function its parameters: names, types and defaults from the config.

KFP reads a pipeline's parameters from its Python signature (and their descriptions from
its docstring), so a graph built at run time from a config needs a signature made at run
time too.
"""

import functools
import inspect
from collections.abc import Callable
from typing import Any

from llm_pipeline.config.run_parameters import RUN_PARAMETERS


def with_parameters(body: Callable[..., None], defaults: dict[str, Any]) -> Callable[..., None]:
    """`body(**parameters)` as a function whose signature lists each run parameter with its
    type and `defaults[name]`, and whose docstring describes them for the Vertex UI."""
    signature = inspect.Signature(
        [
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=defaults[name],
                annotation=RUN_PARAMETERS[name].kind,
            )
            for name in RUN_PARAMETERS
        ]
    )

    @functools.wraps(body)
    def pipeline(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        body(**bound.arguments)

    pipeline.__signature__ = signature  # type: ignore[attr-defined]
    pipeline.__annotations__ = {name: p.kind for name, p in RUN_PARAMETERS.items()}
    pipeline.__doc__ = (
        "The run's parameters; the defaults are the config's values.\n\nArgs:\n"
        + "".join(
            f"    {name}: {p.description} (config: {p.path})\n"
            for name, p in RUN_PARAMETERS.items()
        )
    )
    return pipeline
