"""Models and tokenizers: where their files come from and how they load."""

from llm_pipeline.errors import ModelError, ModelSourceError
from llm_pipeline.models.sources import load_tokenizer, resolve_model_path

__all__ = ["ModelError", "ModelSourceError", "load_tokenizer", "resolve_model_path"]
