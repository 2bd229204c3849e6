# The serve image: the prediction server on Vertex AI's custom container contract; deploys
# without an accelerator register it (vertex.image_repository + /serve). Build it with
# `make images` (Cloud Build), or
#
#   docker build -f containers/serve.Dockerfile -t us-central1-docker.pkg.dev/PROJECT/llm-pipeline/serve:0.1.0 .
#
# CPU, on Python's slim image: the default deploy serves from CPU machines (deploy.machine_type
# n1-standard-8, no accelerator), and without CUDA's libraries the image is a fraction of the
# size, which a new replica pulls before it can start. A deploy with deploy.accelerator_type
# registers serve-cuda.Dockerfile's image instead.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# The same layout as the GPU images: a virtual environment whose bin/ is first on PATH.
RUN python -m venv /opt/venv
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH

# Every package from requirements.lock, each file checked against its hash, at the versions
# CI tests; then torch's CPU build from PyTorch's own index (PyPI's Linux wheel brings GBs of
# CUDA) at the version the lock was resolved with, whose requirements the lock holds, checked
# against its hash too (containers/torch-cpu.txt).
WORKDIR /opt/llm-pipeline
COPY requirements.lock containers/torch-cpu.txt ./
RUN pip install --require-hashes --no-deps -r requirements.lock \
    && pip install --require-hashes --no-deps --index-url https://download.pytorch.org/whl/cpu \
        -r torch-cpu.txt

# The package from this checkout; the build fails unless `python3` is this environment's,
# torch is the CPU build, and every package is at its locked version with every requirement
# met (llm_pipeline.cli.image_check). Then the user it runs as: not root, since the server only
# reads its settings and copies the model into a temporary folder; numeric, so Kubernetes'
# runAsNonRoot can check it, and above the distributions' own users (Ubuntu's has 1000).
COPY setup.py pyproject.toml README.md ./
COPY src ./src
# hadolint ignore=DL3013
RUN pip install --no-deps --no-build-isolation . \
    && python3 -m llm_pipeline.cli.image_check serve --lock requirements.lock \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin serve
USER 10001
WORKDIR /home/serve

# AIP_HTTP_PORT's default. Healthy once the model is loaded: the route answers 503 before.
# The container contract: the server is reached from outside the container, so it listens on
# 0.0.0.0 where AIP_HTTP_PORT is set (cli/serve.py; 127.0.0.1 otherwise). Vertex sets its own.
ENV AIP_HTTP_PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
    CMD ["/opt/venv/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('AIP_HTTP_PORT', '8080') + os.environ.get('AIP_HEALTH_ROUTE', '/health'), timeout=4)"]

# Reads AIP_STORAGE_URI, AIP_HTTP_PORT, AIP_HEALTH_ROUTE and AIP_PREDICT_ROUTE, which Vertex
# sets; `docker run IMAGE --model gs://...` works too.
ENTRYPOINT ["/opt/venv/bin/python", "-m", "llm_pipeline.cli.serve"]
