"""The container image components run in, and re-binding a component to another image."""

from collections.abc import Callable
from typing import Any

from kfp import dsl
from kfp.dsl.python_component import PythonComponent

from llm_pipeline.config.vertex import VertexConfig

#: The published train image (containers/train.Dockerfile) at this package's version; a
#: config names its own through vertex.image_repository or vertex.train_image.
DEFAULT_IMAGE = VertexConfig().image_uri("train")


def component(func: Callable[..., Any]) -> PythonComponent:
    """Declare a lightweight component the way every step here is declared.

    The image already holds this library, so KFP is not pip-installed at start-up
    (`install_kfp_package=False`); KFP's local SubprocessRunner runs exactly these.
    """
    return dsl.component(func, base_image=DEFAULT_IMAGE, install_kfp_package=False)


def with_image(step: PythonComponent, image: str) -> PythonComponent:
    """The same component, run in `image` (the config's `vertex.image_uri()`)."""
    return dsl.component(step.python_func, base_image=image, install_kfp_package=False)
