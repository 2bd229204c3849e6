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
from llm_pipeline.output_files import Step

#: The steps whose components are exported here, in the order they run: all but a
#: preflight's exit task (`pipelines/build.py` adds it to a preflight's run).
STEPS = tuple(step for step in Step if step is not Step.UNDEPLOY_PREFLIGHT)

__all__ = [
    "DEFAULT_IMAGE",
    "STEPS",
    "Step",
    "configure",
    "deploy",
    "download",
    "evaluate",
    "finetune",
    "preprocess",
    "should_deploy",
    "with_image",
]
