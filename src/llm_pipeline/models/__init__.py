"""Models and tokenizers: where their files come from and how they load."""

from llm_pipeline.models.sources import ModelSourceError, load_tokenizer, resolve_model_path

__all__ = ["ModelSourceError", "load_tokenizer", "resolve_model_path"]
