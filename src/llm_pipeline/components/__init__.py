"""The pipeline's KFP components, ready to use in your own pipelines.

from llm_pipeline.components import download, preprocess, should_deploy, deploy
"""

from llm_pipeline.components.configure import configure
from llm_pipeline.components.deploy import deploy
from llm_pipeline.components.download import download
from llm_pipeline.components.evaluate import evaluate
from llm_pipeline.components.finetune import finetune
from llm_pipeline.components.image import DEFAULT_IMAGE, with_image
from llm_pipeline.components.preprocess import preprocess
from llm_pipeline.components.should_deploy import should_deploy

#: The pipeline's steps, in the order they run.
STEPS = (
    "configure",
    "download",
    "preprocess",
    "finetune",
    "evaluate",
    "should_deploy",
    "deploy",
)

__all__ = [
    "DEFAULT_IMAGE",
    "STEPS",
    "configure",
    "deploy",
    "download",
    "evaluate",
    "finetune",
    "preprocess",
    "should_deploy",
    "with_image",
]
