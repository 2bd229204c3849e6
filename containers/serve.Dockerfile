# The serve image: the prediction server on Vertex AI's custom container contract; deploys
# register it (vertex.image_repository + /serve). Build it with `make images` (Cloud Build), or
#
#   docker build -f containers/serve.Dockerfile -t us-docker.pkg.dev/PROJECT/llm-pipeline/serve:0.1.0 .
#
# CPU, on Python's slim image: the default deploy serves from CPU machines (deploy.machine_type
# n1-standard-8, no accelerator), and without CUDA's libraries the image is a fraction of the
# size, which a new replica pulls before it can start. A GPU deploy (deploy.accelerator_type)
# names a CUDA image in vertex.serve_image.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

# torch's CPU build from PyTorch's own index (PyPI's Linux wheel brings GBs of CUDA), at the
# version the Makefile pins and the tests run.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0"

# The package with its serving extras (FastAPI, uvicorn, gcsfs for the gs:// model folder),
# installed from this checkout, which pins it (hadolint cannot tell). Then the user it runs
# as: not root, since the server only reads its settings and copies the model into a
# temporary folder; numeric, so Kubernetes' runAsNonRoot can check it.
WORKDIR /opt/llm-pipeline
COPY setup.py pyproject.toml README.md ./
COPY src ./src
# hadolint ignore=DL3013
RUN pip install ".[serving]" \
    && useradd --create-home --uid 1000 --shell /usr/sbin/nologin serve
USER 1000
WORKDIR /home/serve

# AIP_HTTP_PORT's default. Healthy once the model is loaded: the route answers 503 before.
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('AIP_HTTP_PORT', '8080') + os.environ.get('AIP_HEALTH_ROUTE', '/health'), timeout=4)"]

# Reads AIP_STORAGE_URI, AIP_HTTP_PORT, AIP_HEALTH_ROUTE and AIP_PREDICT_ROUTE, which Vertex
# sets; `docker run IMAGE --model gs://...` works too.
ENTRYPOINT ["python", "-m", "llm_pipeline.serve"]
