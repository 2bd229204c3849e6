# The train image: every pipeline component runs in it (vertex.image_repository + /train),
# and so can a standalone Vertex AI custom job. Build it with `make images` (Cloud Build), or
#
#   docker build -f containers/train.Dockerfile -t us-central1-docker.pkg.dev/PROJECT/llm-pipeline/train:0.1.0 .
#
# PyTorch's CUDA image, devel variant: it has nvcc, which DeepSpeed's ops are compiled with
# below. torch 2.13.0 is the version the lock was resolved with (llm_pipeline.lockfile); CUDA
# 12.6 compiles for A100 (8.0) and H100 (9.0) and, by CUDA 12's minor-version compatibility,
# runs on drivers from 525 on (a CUDA 13 base would need 580).
FROM pytorch/pytorch:2.13.0-cuda12.6-cudnn9-devel

# Where the base keeps Python and its CUDA build of torch. PyTorch's Dockerfile installs
# Miniforge into /opt/conda and puts /opt/conda/bin first on PATH; an Ubuntu 24.04 system
# Python, if the base has one, refuses pip installs (PEP 668) and has no torch.
ARG BASE_PYTHON=/opt/conda/bin/python3
ARG TORCH_VERSION=2.13.0

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# openssh-server, pdsh: DeepSpeed's own launcher (cluster.launcher "deepspeed") starts the
# other nodes' ranks over ssh. Host and user keys are made per job at run time
# (llm_pipeline.launch.ssh), never baked in, so the package's own host keys are deleted.
# libaio-dev: DeepSpeed's async I/O op, which offloads to NVMe. binutils: readelf, with which
# the last step reads what the ops were compiled for.
# Distribution versions are not pinned: the base tag fixes the release, and its security
# updates should land on rebuild.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        openssh-server openssh-client pdsh libaio-dev iproute2 git binutils \
    && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*

# A virtual environment over the base's interpreter: it sees the base's torch (and the CUDA
# libraries torch came with) through --system-site-packages, takes pip installs whatever the
# base's Python says about PEP 668, and its bin/ first on PATH makes `python` and `python3` the
# same interpreter for the ENTRYPOINT, for KFP's `python3 -m kfp.dsl.executor_main` and for
# DeepSpeed's launchers. The build stops here unless that interpreter has torch's CUDA build.
RUN "${BASE_PYTHON}" -c "import sys, torch; sys.exit(None if torch.__version__.startswith('${TORCH_VERSION}') and torch.version.cuda else f'{sys.executable}: torch {torch.__version__}, CUDA {torch.version.cuda}; expected ${TORCH_VERSION} with CUDA')" \
    && "${BASE_PYTHON}" -m venv --system-site-packages /opt/venv
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH

# Everything is installed from requirements.lock, each file checked against its hash, at the
# versions CI tests. DeepSpeed comes first, alone, with its ops compiled now instead of by
# every replica at start-up (a JIT build takes minutes per op and needs nvcc on the node):
# its build requirements first, then DeepSpeed itself, built against the base's torch
# (--no-build-isolation). The ops are the ones llm_pipeline.train.deepspeed_config uses:
#   CPU_ADAM    the optimizer when train.offload_optimizer is "cpu" or "nvme"
#   AIO         the swapper behind "nvme" offload (DeepSpeed adds pin_memory, which it loads)
#   FUSED_ADAM  a user's own DeepSpeed JSON with an Adam optimizer kept on the GPU
# DS_ACCELERATOR=cuda: Cloud Build has no GPU, so DeepSpeed would detect the cpu accelerator,
# build the ops' CPU versions and record accelerator_name 'cpu'; a GPU node would then ignore
# them and JIT-compile (deepspeedai/DeepSpeed's nv-pre-compile-ops workflow builds the same
# way). DS_ENABLE_NINJA=1 and CXX: the C++ sources compile with containers/portable-g++, which
# turns DeepSpeed's -march=native into x86-64-v3, so CPU Adam runs on every training VM's CPU.
# Set for this step only: at run time DeepSpeed detects the machine it is on.
WORKDIR /opt/llm-pipeline
COPY requirements.lock ./
COPY containers/lock-select containers/portable-g++ /usr/local/bin/
ARG TORCH_CUDA_ARCH_LIST="8.0 9.0"
RUN lock-select requirements.lock setuptools ninja py-cpuinfo > /tmp/deepspeed-build.txt \
    && pip install --require-hashes --no-deps -r /tmp/deepspeed-build.txt \
    && lock-select requirements.lock deepspeed > /tmp/deepspeed.txt \
    && DS_ACCELERATOR=cuda DS_ENABLE_NINJA=1 CXX=/usr/local/bin/portable-g++ \
        DS_BUILD_OPS=0 DS_BUILD_CPU_ADAM=1 DS_BUILD_AIO=1 DS_BUILD_FUSED_ADAM=1 \
        TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" \
        pip install --require-hashes --no-deps --no-build-isolation -r /tmp/deepspeed.txt \
    && rm /tmp/deepspeed-build.txt /tmp/deepspeed.txt \
    && pip install --require-hashes --no-deps -r requirements.lock

# The package itself, from this checkout; its requirements are all in place above. Then the
# build fails unless the image is what it claims (llm_pipeline.cli.image_check): `python3`, what
# KFP's commands run, is this environment's; torch is the CUDA build; every package is at its
# locked version and every requirement is met; DeepSpeed recorded the cuda accelerator and
# exactly the ops above; fused Adam holds GPU code; CPU Adam and async I/O are compiled for
# x86-64-v3.
COPY setup.py pyproject.toml README.md ./
COPY src ./src
# hadolint ignore=DL3013
RUN pip install --no-deps --no-build-isolation . \
    && python3 -m llm_pipeline.cli.image_check train --lock requirements.lock \
        --ops async_io,cpu_adam,fused_adam,pin_memory

# The user everything here runs as: KFP's components, a custom job's replicas, their training
# processes, and the sshd of DeepSpeed's launcher. Not root, so code a tampered bucket or
# model repository gets to run cannot rewrite the image's packages or read other users'
# files. No step needs root: sshd listens on 2022 (llm_pipeline.launch.ssh), above the
# privileged ports, and as a non-root process it can log in only the user it runs as, the
# one user DeepSpeed's launcher logs in as; a real shell, since pdsh runs commands through
# it. /run/sshd is made now, owned by root: Debian's sshd refuses to start without it, and
# only root can make it. Numeric, as in the serve images, so runAsNonRoot can check it.
RUN useradd --create-home --uid 10001 --shell /bin/bash train \
    && mkdir -p /run/sshd
USER 10001
WORKDIR /home/train

# `train --config ...` runs a Vertex custom job's replica; any other command (KFP's
# `python3 -m kfp.dsl.executor_main ...`, `sh -c ...`) is run unchanged. Vertex and KFP
# replace the entrypoint with their own command anyway; `docker run IMAGE CMD` lands here.
ENTRYPOINT ["/opt/venv/bin/python", "-m", "llm_pipeline.cli.container"]
CMD ["--help"]
