"""Text classification: a text (or a pair of texts) in, one of a fixed set of labels out.

Everything that differs for this task lives in this package; `TASK` is what the
registry (`llm_pipeline.tasks.TASKS`) hands the layers.
"""

from llm_pipeline.tasks.text_classification.task import TextClassification

TASK = TextClassification

__all__ = ["TASK", "TextClassification"]
