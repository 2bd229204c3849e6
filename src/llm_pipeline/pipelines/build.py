"""The pipeline graph, built from a validated config.

The config is baked into the graph as constant inputs, so a compiled spec is a complete,
reviewable record of what will run; the same graph runs locally and on Vertex AI.
"""

from collections.abc import Callable
from typing import Any, Literal

from kfp import dsl

from llm_pipeline import components
from llm_pipeline.config import PipelineConfig

Target = Literal["local", "vertex"]


def build_pipeline(config: PipelineConfig, *, target: Target = "local") -> Callable[..., Any]:
    """A KFP pipeline function for `config`: call it under `kfp.local`, or compile it."""
    image = config.vertex.image_uri()
    download = components.with_image(components.download, image)
    preprocess = components.with_image(components.preprocess, image)
    # Sections travel as JSON text: KFP's dict parameters cannot carry null or integers.
    sections = {name: getattr(config, name).model_dump_json() for name in ("data", "model")}
    caching = config.vertex.enable_caching if target == "vertex" else False

    @dsl.pipeline(name=config.name, description=config.description or None)
    def pipeline() -> None:
        fetched = download(task=config.task, data=sections["data"])
        fetched.set_display_name("download").set_caching_options(caching)
        tokenized = preprocess(
            task=config.task,
            data=sections["data"],
            model=sections["model"],
            dataset=fetched.outputs["dataset"],
        )
        tokenized.set_display_name("preprocess").set_caching_options(caching)

    return pipeline
