"""Pipeline graphs built from a config."""

from llm_pipeline.pipelines.build import build_pipeline

__all__ = ["build_pipeline"]
