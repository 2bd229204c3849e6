"""KFP component: the run's parameters applied to the config, validated, split by step.

Its signature is made from the table of run parameters (`config.run_parameters`) and its
outputs from the sections the step hands on (`steps.configure.SECTIONS`), so that a new run
parameter is written in one place. KFP reads a lightweight component's interface from the
function's signature and ships the function's source text (`inspect.getsource`) to the
container, where the executor runs it; so the function is written here as source text and
compiled under a file name registered in `linecache`, where `inspect` reads it back.
"""

import linecache
import textwrap
from collections.abc import Callable
from typing import Any, NamedTuple

from kfp.dsl import Artifact, Output

from llm_pipeline.components.image import component
from llm_pipeline.config.run_parameters import RUN_PARAMETERS
from llm_pipeline.steps.configure import SECTIONS

_SOURCE = '''def configure(
    config: str,
    resolved: Output[Artifact],
{parameters}
    project: str = "",
    region: str = "",
) -> NamedTuple(
    "Sections",
    [
{sections}
    ],
):
    """Apply the pipeline's parameters to the config and validate it, as `--set` would.

    The pipeline's first step: a bad value from the Vertex "Create run" form fails here,
    naming the parameter and the config key, before anything else starts.

    Args:
        config: The whole config as JSON (`llm_pipeline.config.PipelineConfig`).
{parameter_names}
            (`llm_pipeline.config.run_parameters`); an empty `model_source` keeps the
            config's model.
        project, region: Where the run runs (on Vertex AI the pipeline passes the
            placeholders that Vertex fills in). They complete a
            config that names no `vertex.project` (a spec uploaded in the UI), so that
            should-deploy and deploy find the registry in the run's own project.

    Outputs:
        resolved: The validated config this run uses, as JSON.
{section_names}
            as JSON text, for the steps.
    """
    arguments = dict(locals())
    from collections import namedtuple

    from llm_pipeline.steps.configure import run_configure

    sections = run_configure(arguments)
    return namedtuple("Sections", sections)(**sections)
'''


def _listed(names: list[str], then: str) -> str:
    """`names` and `then` as a docstring's `Args:` entry, wrapped as the code is."""
    indent = " " * 8
    return textwrap.fill(
        f"{', '.join(names)}{then}", width=100, initial_indent=indent, subsequent_indent=indent
    )


def _source() -> str:
    return _SOURCE.format(
        parameters="\n".join(
            f"    {name}: {parameter.kind.__name__}," for name, parameter in RUN_PARAMETERS.items()
        ),
        sections="\n".join(f'        ("{name}", str),' for name in SECTIONS),
        parameter_names=_listed(list(RUN_PARAMETERS), ": the run's parameters"),
        section_names=_listed(list(SECTIONS), ": each section"),
    )


def _compiled(source: str, name: str) -> Callable[..., Any]:
    """The function `name` defined by `source`, its source text where `inspect` finds it."""
    filename = f"<{__name__}, made from llm_pipeline.config.run_parameters>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {
        "__name__": __name__,
        "Artifact": Artifact,
        "NamedTuple": NamedTuple,
        "Output": Output,
    }
    exec(compile(source, filename, "exec"), namespace)
    function: Callable[..., Any] = namespace[name]
    return function


configure = component(_compiled(_source(), "configure"))
