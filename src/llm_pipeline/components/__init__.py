"""The pipeline's KFP components, ready to use in your own pipelines.

from llm_pipeline.components import download, preprocess
"""

from llm_pipeline.components.download import download
from llm_pipeline.components.evaluate import evaluate
from llm_pipeline.components.finetune import finetune
from llm_pipeline.components.image import DEFAULT_IMAGE, with_image
from llm_pipeline.components.preprocess import preprocess

#: The pipeline's steps, in the order they run.
STEPS = ("download", "preprocess", "finetune", "evaluate")

__all__ = [
    "DEFAULT_IMAGE",
    "STEPS",
    "download",
    "evaluate",
    "finetune",
    "preprocess",
    "with_image",
]
