# The train image: every pipeline component runs in it (vertex.image_repository + /train),
# and so can a standalone Vertex AI custom job. Build it with `make images` (Cloud Build), or
#
#   docker build -f containers/train.Dockerfile -t us-docker.pkg.dev/PROJECT/llm-pipeline/train:0.1.0 .
#
# PyTorch's CUDA image, devel variant: it has nvcc, which DeepSpeed's ops are compiled with
# below. torch 2.13.0 is the version the Makefile pins for CPUs (what the tests run); CUDA 12.6
# compiles for A100 (8.0) and H100 (9.0) and, by CUDA 12's minor-version compatibility, runs
# on drivers from 525 on (a CUDA 13 base would need 580).
FROM pytorch/pytorch:2.13.0-cuda12.6-cudnn9-devel

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1

# openssh-server, pdsh: DeepSpeed's own launcher (cluster.launcher "deepspeed") starts the
# other nodes' ranks over ssh. Host and user keys are made per job at run time
# (llm_pipeline.train.ssh), never baked in, so the package's own host keys are deleted.
# libaio-dev: DeepSpeed's async I/O op, which offloads to NVMe.
# Distribution versions are not pinned: the base tag fixes the release, and its security
# updates should land on rebuild.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        openssh-server openssh-client pdsh libaio-dev iproute2 git \
    && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*

# DeepSpeed with its ops compiled now, for A100 and H100, instead of by every replica at
# start-up (a JIT build takes minutes per op and needs the compiler on the training node).
# Only the ops this package uses (llm_pipeline.train.deepspeed_config):
#   CPU_ADAM    the optimizer when train.offload_optimizer is "cpu" or "nvme"
#   AIO         the swapper behind "nvme" offload (DeepSpeed adds pin_memory, which it loads)
#   FUSED_ADAM  a user's own DeepSpeed JSON with an Adam optimizer kept on the GPU
# --no-build-isolation: the ops must be built against the torch already here. The version
# is the newest in setup.py's range (>=0.19,<0.20), the one the tests run. ds_report lists
# the ops built.
ARG DEEPSPEED_VERSION=0.19.8
ENV TORCH_CUDA_ARCH_LIST="8.0 9.0"
RUN DS_BUILD_OPS=0 DS_BUILD_CPU_ADAM=1 DS_BUILD_AIO=1 DS_BUILD_FUSED_ADAM=1 \
        pip install --no-build-isolation "deepspeed==${DEEPSPEED_VERSION}" \
    && ds_report

# The package with its Google Cloud extras (GCS, Vertex AI, pipeline components) and s3://
# data sources; torch and DeepSpeed above already satisfy its requirements and are kept.
# It is installed from this checkout, which pins it (hadolint cannot tell).
WORKDIR /opt/llm-pipeline
COPY setup.py pyproject.toml README.md ./
COPY src ./src
# hadolint ignore=DL3013
RUN pip install ".[gcp,aws]"

# `train --config ...` runs a Vertex custom job's replica; any other command (KFP's
# `python -m kfp.dsl.executor_main ...`, `sh -c ...`) is run unchanged. Vertex and KFP
# replace the entrypoint with their own command anyway; `docker run IMAGE CMD` lands here.
ENTRYPOINT ["python", "-m", "llm_pipeline.entrypoint"]
CMD ["--help"]
