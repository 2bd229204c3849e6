"""Summarization: a document in, a short summary out.

Everything that differs for this task lives in this package; `TASK` is what the
registry (`llm_pipeline.tasks.TASKS`) hands the layers.
"""

from llm_pipeline.tasks.summarization.task import Summarization

TASK = Summarization

__all__ = ["TASK", "Summarization"]
