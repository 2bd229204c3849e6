"""llm-pipeline: fine-tune Hugging Face models with DeepSpeed in Kubeflow Pipelines, then
evaluate, gate, register and serve them, on this machine or on Vertex AI.

One pipeline serves every task; what differs between tasks (the data they read, the model
they train, how it is scored and served) is each task's package in `llm_pipeline.tasks`.

`__version__` is written here only: setup.py reads it, the image tags follow it
(`vertex.image_repository`), and `make images` passes it to cloudbuild.yaml.
"""

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__version__ = "0.1.0"


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's `__getattr__` (PEP 562) that imports the module `exports[name]` names on
    the first use of `name`: the package's light modules stay light to import while its
    face still offers the names that need torch, FastAPI or httpx."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(exports[name]), name)

    return __getattr__
