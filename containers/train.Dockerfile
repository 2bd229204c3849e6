# The image every pipeline component runs in (vertex.image). KFP supplies the command, so
# there is no ENTRYPOINT: each step runs `python -m kfp.dsl.executor_main` over the
# component's function, which imports llm_pipeline from this image.
#
#   docker build -f containers/train.Dockerfile -t us-docker.pkg.dev/PROJECT/llm-pipeline/train:0.1.0 .
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
# openssh: DeepSpeed's own launcher reaches the other nodes over ssh. Host and user keys are
# made per job at run time (llm_pipeline.train.ssh), never baked into this image.
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-dev build-essential openssh-server openssh-client \
        iproute2 pdsh libaio-dev git \
    && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*

RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# A CUDA build of torch (the default index); the CPU pin in the Makefile is for laptops only.
RUN pip install --upgrade pip && pip install "torch>=2.4"

WORKDIR /opt/llm-pipeline
COPY setup.py pyproject.toml README.md ./
COPY src ./src
RUN pip install ".[gcp,aws]"
