"""Data steps: download a dataset source into the task's shape (`data.download`), and read
the preprocess step's saved dataset back (`data.saved`).

This face imports neither: the steps that only read a saved dataset (evaluate, finetune)
do not load the downloader and its sources.
"""

from llm_pipeline.errors import DataError

__all__ = ["DataError"]
