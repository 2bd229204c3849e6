"""Two nodes under DeepSpeed's own launcher, for real: per-job ssh keys, sshd, pdsh.

Two network namespaces joined by a veth pair, one replica of the finetune step in each, with
`cluster.launcher = "deepspeed"`. The primary makes the job's ssh keys in the shared
checkpoint folder (what Vertex's /gcs/ mount is on a cluster), every node starts an sshd on
port 2022 inside its namespace, and the primary runs `deepspeed --hostfile`, whose pdsh
reaches both nodes' sshd over the veth link and starts one rank on each.

ssh reads the client config from the user's home in the password database, not $HOME, so the
run writes `~/.ssh/config` and `~/.llm-pipeline-ssh/` there; the test removes what it made.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.train.checkpoints import MARKER

from .two_nodes import assert_one_job_of_two_nodes, run_two_replicas

pytestmark = pytest.mark.slow

SUBNET = "10.213.48"
PORT = 29527
# Both ends get the same name inside their namespaces, so one GLOO_SOCKET_IFNAME (carried to
# every rank by DeepSpeed's launcher) fits both nodes, as one NCCL_SOCKET_IFNAME does on a
# cluster of identical VMs.
IFNAME = "lpds0"
SSHD = Path("/usr/sbin/sshd")


def _missing_tools() -> list[str]:
    missing = [tool for tool in ("pdsh", "ssh", "ssh-keygen", "ip") if not shutil.which(tool)]
    if not SSHD.is_file():
        missing.append(str(SSHD))
    return missing


@pytest.fixture
def ssh_home() -> Iterator[Path]:
    """The user's home as ssh sees it; whatever the run writes there is removed afterwards."""
    missing = _missing_tools()
    if missing:
        pytest.skip(
            f"DeepSpeed's multi-node launcher needs {', '.join(missing)} "
            "(apt-get install openssh-server openssh-client pdsh iproute2)"
        )
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    config = home / ".ssh" / "config"
    if config.exists():
        pytest.skip(f"{config} exists; the run would have to replace ssh settings of this host")
    keys = home / ".llm-pipeline-ssh"
    before = set(keys.iterdir()) if keys.is_dir() else set()
    had_ssh_dir, had_keys_dir = config.parent.exists(), keys.exists()
    try:
        yield home
    finally:
        config.unlink(missing_ok=True)
        if not had_ssh_dir:
            shutil.rmtree(config.parent, ignore_errors=True)
        for folder in set(keys.iterdir()) - before if keys.is_dir() else ():
            shutil.rmtree(folder, ignore_errors=True)
        if not had_keys_dir:
            shutil.rmtree(keys, ignore_errors=True)


def test_deepspeed_launcher_trains_across_two_nodes_over_ssh(
    ssh_home: Path,
    two_namespaces: tuple[str, str],
    tokenized_docstrings: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Callable[..., TrainConfig],
) -> None:
    job = f"ds-{uuid.uuid4().hex[:8]}"
    primary, worker = run_two_replicas(
        two_namespaces,
        tmp_path,
        dataset_dir=tokenized_docstrings,
        address=(SUBNET, PORT),
        ifname=IFNAME,
        model=tiny_t5_model,
        train=train_settings(max_steps=6, save_steps=3),
        cluster={"processes": 1, "launcher": "deepspeed"},
        # One folder both nodes see, as Vertex's gs:// checkpoint folder under /gcs/: the
        # nodes exchange the job's ssh keys through it.
        node_env=lambda node: {
            "CLOUD_ML_JOB_ID": job,
            "AIP_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        },
        timeout_s=240,
    )
    assert_one_job_of_two_nodes(primary, worker, steps=6, batch=4)
    # The model is written once, by the primary: the output folder, and no other outside the
    # checkpoints (which hold rank 0's copy per checkpoint, as on one node).
    assert (tmp_path / "model" / "model.safetensors").is_file()
    written = [p.parent for p in tmp_path.rglob("model.safetensors")]
    assert [p for p in written if "checkpoints" not in p.parts] == [tmp_path / "model"]
    # Both ranks took part, one per node: each saved its own ZeRO shard of the checkpoint.
    checkpoint = next((tmp_path / "checkpoints").glob("run-*/checkpoint-3"))
    assert (checkpoint / MARKER).is_file()
    shards = sorted(p.name for p in checkpoint.glob("global_step3/*optim_states.pt"))
    assert shards == [f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in (0, 1)]
    # The launcher went through ssh: the worker node answered the primary's nonce.
    done = json.loads((tmp_path / "checkpoints" / f"ssh-{job}" / "done.json").read_text())
    assert done["exit_code"] == 0
