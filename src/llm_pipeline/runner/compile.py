"""Write a pipeline spec that the Vertex Pipelines UI (or `aiplatform.PipelineJob`) takes."""

from pathlib import Path
from typing import Any

from kfp import compiler


def compile_pipeline(pipeline: Any, path: str | Path) -> Path:
    """Compile `pipeline` to YAML at `path` and return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(pipeline_func=pipeline, package_path=str(target))
    return target
