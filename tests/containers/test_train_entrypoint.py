"""The train image's entrypoint as the image runs it: a command passed through, a Vertex job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

from .dockerfile import CONTAINERS, exec_form, image_command
from .job import VertexJob

TRAIN = "train.Dockerfile"


def run_image(*args: str) -> subprocess.CompletedProcess[str]:
    """`docker run IMAGE ARGS...`, without Docker: the ENTRYPOINT with ARGS appended."""
    return subprocess.run(
        [*image_command(TRAIN), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_command_runs_unchanged_and_its_exit_code_is_the_images() -> None:
    script = "import sys; print(sys.argv[1:]); sys.exit(7)"

    done = run_image(sys.executable, "-c", script, "--config", "a b", "'quoted'")

    assert done.returncode == 7, done.stderr
    assert done.stdout.strip() == str(["--config", "a b", "'quoted'"])


def test_kfp_style_shell_command_replaces_the_entrypoint_process() -> None:
    # KFP's commands are `sh -c "..."`; exec'd, the shell keeps the entrypoint's pid, so the
    # signals Docker or Vertex send reach it.
    process = subprocess.Popen(
        [*image_command(TRAIN), "sh", "-c", 'echo "$0 $$"; exit 3', "kfp"],
        stdout=subprocess.PIPE,
        text=True,
    )
    output, _ = process.communicate(timeout=60)

    assert process.returncode == 3
    assert output.split() == ["kfp", str(process.pid)]


def test_a_missing_command_exits_127_with_its_name() -> None:
    done = run_image("no-such-command-here")

    assert done.returncode == 127
    assert "no-such-command-here: command not found" in done.stderr


def test_the_default_command_prints_help() -> None:
    done = run_image(*exec_form(CONTAINERS / TRAIN, "CMD"))

    assert done.returncode == 0, done.stderr
    assert "train" in done.stdout and "COMMAND" in done.stdout


def test_train_without_a_model_folder_says_what_vertex_sets() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIP_")}
    done = subprocess.run(
        [*image_command(TRAIN), "train", "--config", "configs/local.json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2
    assert "AIP_MODEL_DIR" in done.stderr and "--model-dir" in done.stderr


def test_train_refuses_a_config_with_every_problem_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": {"dataset": "x"}, "model": {}, "vertex": {"image": "i"}}))

    done = subprocess.run(
        [*image_command(TRAIN), "train", "--config", str(bad), "--model-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2, done.stderr
    assert "vertex.image: replaced by vertex.image_repository" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_vertex_job_trains_on_the_cpu_and_writes_the_model_to_aip_model_dir(
    vertex_job: VertexJob,
) -> None:
    done = vertex_job.result
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    gcs = fsspec.filesystem("gs")

    model = {path.rsplit("/", 1)[1] for path in gcs.find(vertex_job.model_dir)}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "llm_pipeline_config.json",
    } <= model
    config = json.loads(gcs.cat(vertex_job.model_dir.rstrip("/") + "/config.json"))
    assert (config["model_type"], config["d_model"], config["num_layers"]) == ("t5", 32, 2)
    # Checkpoints went to AIP_CHECKPOINT_DIR, event files to AIP_TENSORBOARD_LOG_DIR.
    checkpoints = gcs.find(vertex_job.env["AIP_CHECKPOINT_DIR"])
    assert any(path.endswith("/checkpoint-2/COMPLETE.json") for path in checkpoints)
    logs = gcs.find(vertex_job.env["AIP_TENSORBOARD_LOG_DIR"])
    assert any("events.out.tfevents" in path for path in logs)
    # The job says where the model went and what it measured.
    assert f"model: {vertex_job.model_dir}" in done.stdout
    metrics = json.loads(done.stdout.split("metrics: ", 1)[1].splitlines()[0])
    assert metrics["global_step"] == 4
