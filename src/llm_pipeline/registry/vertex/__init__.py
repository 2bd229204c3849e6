"""The Vertex AI registry: Model Registry versions and Endpoints through the aiplatform SDK."""

from llm_pipeline.registry.vertex.registry import VertexRegistry

__all__ = ["VertexRegistry"]
