# The CUDA serve image: the same prediction server for deploys with an accelerator
# (deploy.accelerator_type set: the deploy registers vertex.image_repository + /serve-cuda).
# Build it with `make images` (Cloud Build), or
#
#   docker build -f containers/serve-cuda.Dockerfile -t us-central1-docker.pkg.dev/PROJECT/llm-pipeline/serve-cuda:0.1.0 .
#
# PyTorch's CUDA image, runtime variant: the same torch build as the train image without the
# compilers, so several GB lighter; CUDA 12.6 runs on T4, L4, A100 and H100 with drivers from
# 525 on. The server puts the model on the GPU when one is there (models.generation).
FROM pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime

# Where the base keeps Python and torch's CUDA build (see train.Dockerfile).
ARG BASE_PYTHON=/opt/conda/bin/python3
ARG TORCH_VERSION=2.13.0

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# A virtual environment over the base's interpreter, which must have torch's CUDA build:
# pip installs work whatever the base's Python says about PEP 668, and `python`, `python3`
# are this environment's.
RUN "${BASE_PYTHON}" -c "import sys, torch; sys.exit(None if torch.__version__.startswith('${TORCH_VERSION}') and torch.version.cuda else f'{sys.executable}: torch {torch.__version__}, CUDA {torch.version.cuda}; expected ${TORCH_VERSION} with CUDA')" \
    && "${BASE_PYTHON}" -m venv --system-site-packages /opt/venv
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH

# Every package from requirements.lock, each file checked against its hash; torch stays the
# base's.
WORKDIR /opt/llm-pipeline
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock

# The package from this checkout; the build fails unless `python3` is this environment's,
# torch is the CUDA build, and every package is at its locked version with every requirement
# met (llm_pipeline.cli.image_check). Then the user it runs as, as in serve.Dockerfile.
COPY setup.py pyproject.toml README.md ./
COPY src ./src
# hadolint ignore=DL3013
RUN pip install --no-deps --no-build-isolation . \
    && python3 -m llm_pipeline.cli.image_check serve-cuda --lock requirements.lock \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin serve
USER 10001
WORKDIR /home/serve

# The container contract: the server is reached from outside the container, so it listens on
# 0.0.0.0 where AIP_HTTP_PORT is set (cli/serve.py; 127.0.0.1 otherwise). Vertex sets its own.
ENV AIP_HTTP_PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=900s --retries=3 \
    CMD ["/opt/venv/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('AIP_HTTP_PORT', '8080') + os.environ.get('AIP_HEALTH_ROUTE', '/health'), timeout=4)"]

ENTRYPOINT ["/opt/venv/bin/python", "-m", "llm_pipeline.cli.serve"]
