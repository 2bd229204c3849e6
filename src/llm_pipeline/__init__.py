"""llm-pipeline: fine-tune seq2seq models with DeepSpeed in Kubeflow Pipelines and ship them.

`__version__` is written here only: setup.py reads it, the image tags follow it
(`vertex.image_repository`), and `make images` passes it to cloudbuild.yaml.
"""

__version__ = "0.1.0"
