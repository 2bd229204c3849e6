"""Data steps: download a dataset source into the task's shape."""

from llm_pipeline.data.download import download_dataset
from llm_pipeline.errors import DataError

__all__ = ["DataError", "download_dataset"]
