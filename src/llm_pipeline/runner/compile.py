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


def compile_shipped_pipelines(configs: str | Path, folder: str | Path) -> list[Path]:
    """Compile, for Vertex AI, every config in `configs` that deploys to Vertex, into
    `folder/<config stem>.yaml`: the specs people upload in the Vertex Pipelines UI."""
    from llm_pipeline.config import load_config
    from llm_pipeline.pipelines import build_pipeline

    written = []
    for path in sorted(Path(configs).glob("*.json")):
        config = load_config(path).config
        if config.deploy.target == "vertex":
            pipeline = build_pipeline(config, target="vertex")
            written.append(compile_pipeline(pipeline, Path(folder) / f"{path.stem}.yaml"))
    return written


def compile_components(folder: str | Path) -> list[Path]:
    """Write every component's spec to `folder`, for `kfp.components.load_component_from_*`."""
    from llm_pipeline import components

    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for step in components.STEPS:
        path = target / f"{step.function}.yaml"
        compiler.Compiler().compile(getattr(components, step.function), package_path=str(path))
        written.append(path)
    return written
