"""The local registry: model versions and endpoints in a folder on this machine."""

from llm_pipeline.registry.local.registry import LocalRegistry

__all__ = ["LocalRegistry"]
