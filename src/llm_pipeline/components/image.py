"""The container image components run in, and re-binding a component to another image."""

from collections.abc import Callable
from typing import Any

from kfp import dsl
from kfp.dsl.python_component import PythonComponent

#: Image built from containers/train.Dockerfile; configs name their own (vertex.image).
DEFAULT_IMAGE = "us-docker.pkg.dev/llm-pipeline/llm-pipeline/train:0.1.0"


def component(func: Callable[..., Any]) -> PythonComponent:
    """Declare a lightweight component the way every step here is declared.

    The image already holds this library, so KFP is not pip-installed at start-up
    (`install_kfp_package=False`); KFP's local SubprocessRunner runs exactly these.
    """
    return dsl.component(func, base_image=DEFAULT_IMAGE, install_kfp_package=False)


def with_image(step: PythonComponent, image: str) -> PythonComponent:
    """The same component, run in `image` (the config's vertex.image)."""
    return dsl.component(step.python_func, base_image=image, install_kfp_package=False)
