"""Sending a built pipeline to Vertex AI Pipelines: compile, submit and watch a run, publish a
template, and schedule retraining."""

from llm_pipeline.vertex.compile import compile_pipeline

__all__ = ["compile_pipeline"]
