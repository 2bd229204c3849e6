"""Launch command lines and DeepSpeed's files, compared whole; one real torchrun on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llm_pipeline.launch.cluster import ClusterInfo, detect_cluster
from llm_pipeline.launch.commands import (
    deepspeed_command,
    deepspeed_env_file,
    deepspeed_hostfile,
    torchrun_command,
)

PY = sys.executable
RUN = [PY, "-m", "torch.distributed.run"]
HOSTS = ("primary-0", "workers-0", "workers-1", "workers-2")


def cluster(node_rank: int = 0, node_count: int = 4, procs: int = 8) -> ClusterInfo:
    return ClusterInfo(
        node_rank=node_rank,
        node_count=node_count,
        master_addr="primary-0",
        master_port=2222,
        procs_per_node=procs,
        hosts=HOSTS[:node_count],
        source="vertex",
    )


def test_single_node_is_standalone():
    single = detect_cluster({}, procs_per_node=2)
    command = torchrun_command(single, module="llm_pipeline.train.worker", script_args=["--x=1"])
    assert command == [
        *RUN,
        "--standalone",
        "--nproc_per_node=2",
        "--max_restarts=0",
        "--module",
        "llm_pipeline.train.worker",
        "--x=1",
    ]


@pytest.mark.parametrize("node_rank", [0, 3])
def test_multi_node_uses_static_rendezvous_at_the_primary(node_rank: int):
    command = torchrun_command(
        cluster(node_rank),
        script="/app/train.py",
        script_args=["--config", "/gcs/b/run/config.json"],
        max_restarts=2,
        rdzv_timeout_s=600,
    )
    assert command == [
        *RUN,
        "--nnodes=4",
        f"--node_rank={node_rank}",
        "--master_addr=primary-0",
        "--master_port=2222",
        "--rdzv_conf=timeout=600",
        "--nproc_per_node=8",
        "--max_restarts=2",
        "/app/train.py",
        "--config",
        "/gcs/b/run/config.json",
    ]


def test_vertex_worker_end_to_end():
    spec = {
        "cluster": {
            "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
            "workerpool1": ["cmle-training-workerpool1-ab-0:2222"],
        },
        "environment": "cloud",
        "task": {"type": "workerpool1", "index": 0},
    }
    info = detect_cluster({"CLUSTER_SPEC": json.dumps(spec)}, procs_per_node=4)
    assert torchrun_command(info, module="m", script_args=[]) == [
        *RUN,
        "--nnodes=2",
        "--node_rank=1",
        "--master_addr=cmle-training-workerpool0-ab-0",
        "--master_port=2222",
        "--rdzv_conf=timeout=1800",
        "--nproc_per_node=4",
        "--max_restarts=0",
        "--module",
        "m",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of module"),
        ({"module": "m", "script": "s.py"}, "exactly one of module"),
        ({"module": "m", "max_restarts": -1}, "max_restarts: must be >= 0"),
        ({"module": "m", "rdzv_timeout_s": 0}, "rdzv_timeout_s: must be >= 1"),
    ],
)
def test_torchrun_refuses_bad_arguments(kwargs: dict, message: str):
    with pytest.raises(ValueError, match=message):
        torchrun_command(cluster(), script_args=[], **kwargs)


def test_hostfile():
    assert deepspeed_hostfile(HOSTS, slots=8) == (
        "primary-0 slots=8\nworkers-0 slots=8\nworkers-1 slots=8\nworkers-2 slots=8\n"
    )


@pytest.mark.parametrize(
    ("hosts", "slots", "message"),
    [
        (HOSTS, 0, "slots: must be >= 1"),
        ((), 8, "hosts: the DeepSpeed launcher needs every node's hostname"),
        (("a", "a"), 8, "hosts: must be unique"),
        (("a b",), 8, "is not a hostname"),
    ],
)
def test_hostfile_refuses_bad_arguments(hosts: tuple[str, ...], slots: int, message: str):
    with pytest.raises(ValueError, match=message):
        deepspeed_hostfile(hosts, slots=slots)


def test_deepspeed_command():
    command = deepspeed_command(
        cluster(),
        hostfile="/root/.llm-pipeline/hostfile",
        module="llm_pipeline.train.worker",
        script_args=["--config", "c.json"],
        ssh_port=2022,
    )
    assert command == [
        PY,
        "-m",
        "deepspeed.launcher.runner",
        "--hostfile=/root/.llm-pipeline/hostfile",
        "--master_addr=primary-0",
        "--master_port=2222",
        "--num_nodes=4",
        "--num_gpus=8",
        "--ssh_port=2022",
        "--module",
        "llm_pipeline.train.worker",
        "--config",
        "c.json",
    ]


def test_deepspeed_command_refuses_ssh_on_the_master_port():
    with pytest.raises(ValueError, match="ssh_port: 2222 is also the master port"):
        deepspeed_command(cluster(), hostfile="h", script="t.py", script_args=[], ssh_port=2222)


def test_deepspeed_env_file_carries_allowed_variables_and_never_a_secret():
    env = {
        "PATH": "/opt/conda/bin:/usr/bin",
        "AIP_MODEL_DIR": "gs://bucket/run/model",
        "HF_HUB_OFFLINE": "1",
        "NCCL_DEBUG": "INFO",
        "TRANSFORMERS_CACHE": "/cache/with space",
        "TOKENIZERS_PARALLELISM": "false",
        "CLUSTER_SPEC": '{"cluster": {}}',
        "HOME": "/root",
        # Secrets, and what their prefixes alone once let through: never.
        "HF_TOKEN": "hf_planted_secret_123",
        "HUGGING_FACE_HUB_TOKEN": "hf_x",
        "HF_SOMETHING_NEW": "x",
        "GOOGLE_APPLICATION_CREDENTIALS": "/keys/sa.json",
        "GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.x",
        "AIP_SECRET": "x",
        "NCCL_KEY": "x",
    }
    assert deepspeed_env_file(env) == (
        "AIP_MODEL_DIR=gs://bucket/run/model\n"
        "HF_HUB_OFFLINE=1\n"
        "NCCL_DEBUG=INFO\n"
        "PATH=/opt/conda/bin:/usr/bin\n"
        "TOKENIZERS_PARALLELISM=false\n"
        "TRANSFORMERS_CACHE=/cache/with space\n"
    )
    assert deepspeed_env_file(env, names={"HOME", "HF_TOKEN"}, prefixes=()) == "HOME=/root\n"


@pytest.mark.parametrize("value", ['{"a": 1}', "$HOME/x", "a\nb", "back\\slash", "`id`"])
def test_deepspeed_env_file_refuses_values_the_launcher_would_change(value: str):
    with pytest.raises(ValueError, match=r"^HF_HOME: its value holds"):
        deepspeed_env_file({"HF_HOME": value})


@pytest.mark.slow
def test_torchrun_command_runs_two_cpu_processes(tmp_path: Path):
    """The single-node command really starts two ranks that meet over gloo."""
    script = tmp_path / "worker.py"
    script.write_text(
        "import sys, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = __import__('torch').ones(1) * (dist.get_rank() + 1)\n"
        "dist.all_reduce(t)\n"
        "open(sys.argv[1] + f'/rank{dist.get_rank()}', 'w').write(str(int(t.item())))\n"
        "dist.destroy_process_group()\n"
    )
    command = torchrun_command(
        detect_cluster({}, procs_per_node=2), script=str(script), script_args=[str(tmp_path)]
    )
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    assert {p.name: p.read_text() for p in tmp_path.glob("rank*")} == {"rank0": "3", "rank1": "3"}


def test_hostfile_from_a_vertex_cluster_spec():
    spec = {
        "cluster": {
            "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
            "workerpool1": [
                "cmle-training-workerpool1-ab-0:2222",
                "cmle-training-workerpool1-ab-1:2222",
            ],
            "workerpool2": ["cmle-training-workerpool2-ab-0:2222"],
        },
        "task": {"type": "workerpool0", "index": 0},
    }
    info = detect_cluster({"CLUSTER_SPEC": json.dumps(spec)}, procs_per_node=8)
    assert deepspeed_hostfile(info.hosts, slots=info.procs_per_node) == (
        "cmle-training-workerpool0-ab-0 slots=8\n"
        "cmle-training-workerpool1-ab-0 slots=8\n"
        "cmle-training-workerpool1-ab-1 slots=8\n"
    )


def test_launchers_parse_the_commands_as_meant():
    """torchrun's and DeepSpeed's own argument parsers read what the builders mean."""
    from deepspeed.launcher.runner import parse_args as deepspeed_parse
    from torch.distributed.run import parse_args as torchrun_parse

    ran = torchrun_parse(torchrun_command(cluster(3), module="m", script_args=["--a=1"])[3:])
    assert (
        ran.nnodes,
        ran.node_rank,
        ran.master_addr,
        ran.master_port,
        ran.nproc_per_node,
        ran.rdzv_backend,
        ran.rdzv_conf,
        ran.module,
        ran.training_script,
        ran.training_script_args,
    ) == ("4", 3, "primary-0", 2222, "8", "static", "timeout=1800", True, "m", ["--a=1"])

    ds = deepspeed_parse(
        deepspeed_command(
            cluster(), hostfile="hf", module="m", script_args=["--a=1"], ssh_port=2022
        )[3:]
    )
    assert (
        ds.hostfile,
        ds.master_addr,
        ds.master_port,
        ds.num_nodes,
        ds.num_gpus,
        ds.ssh_port,
        ds.module,
        ds.user_script,
        ds.user_args,
    ) == ("hf", "primary-0", 2222, 4, 8, 2022, True, "m", ["--a=1"])
