"""Sending a built pipeline to Vertex AI Pipelines: compile, submit and watch a run, publish a
template, and schedule retraining."""

from typing import TYPE_CHECKING

from llm_pipeline import lazy_exports

if TYPE_CHECKING:
    from llm_pipeline.vertex.compile import compile_pipeline

__all__ = ["compile_pipeline"]

# KFP's compiler loads on first use: the CLI imports this package's light modules (targets,
# schedules) for every command, `registry` and `serve` among them.
__getattr__ = lazy_exports(__name__, {"compile_pipeline": "llm_pipeline.vertex.compile"})
