"""Two nodes under DeepSpeed's own launcher, for real: per-node ssh keys, sshd, pdsh.

Two network namespaces joined by a veth pair, one replica of the finetune step in each, with
`cluster.launcher = "deepspeed"`. Each node makes its own keys in a private folder, the nodes
exchange only public keys through the shared checkpoint folder (what Vertex's /gcs/ mount is
on a cluster), every node starts an sshd on port 2022 inside its namespace, and the primary
runs `deepspeed --hostfile`, whose pdsh reaches both nodes' sshd over the veth link and starts
one rank on each. While it runs, every process's command line and every file in the shared
folder are watched for a planted token and for private keys.

ssh reads the client config from the user's home in the password database, not $HOME, so the
run writes `~/.ssh/config` and `~/.llm-pipeline-ssh/` there and removes them when it ends;
the fixture removes whatever a failed run left.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.train.checkpoints import MARKER

from .two_nodes import assert_one_job_of_two_nodes, start_two_replicas, wait_for_replicas

pytestmark = pytest.mark.slow

SUBNET = "10.213.48"
PORT = 29527
# Both ends get the same name inside their namespaces, so one GLOO_SOCKET_IFNAME (carried to
# every rank by DeepSpeed's launcher) fits both nodes, as one NCCL_SOCKET_IFNAME does on a
# cluster of identical VMs.
IFNAME = "lpds0"
SSHD = Path("/usr/sbin/sshd")
# A token every node has in its environment: the ranks must get it, and nothing else may.
TOKEN = "hf_planted_secret_123"


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
    shared = tmp_path / "checkpoints" / f"ssh-{job}"
    # A job killed earlier (kill -9 leaves no `finally`) may have left its folder: this one's
    # must go, and another's is not this job's to judge.
    private = ssh_home / ".llm-pipeline-ssh"
    earlier = set(private.iterdir()) if private.is_dir() else set()
    processes = start_two_replicas(
        two_namespaces,
        tmp_path,
        dataset_dir=tokenized_docstrings,
        address=(SUBNET, PORT),
        ifname=IFNAME,
        model=tiny_t5_model,
        train=train_settings(max_steps=6, save_steps=3),
        cluster={"processes": 1, "launcher": "deepspeed"},
        # One folder both nodes see, as Vertex's gs:// checkpoint folder under /gcs/: the
        # nodes exchange public keys through it. Each node has the token in its environment.
        node_env=lambda node: {
            "CLOUD_ML_JOB_ID": job,
            "AIP_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
            "HF_TOKEN": TOKEN,
        },
    )
    seen = _watch_while_running(processes, shared)
    primary, worker = wait_for_replicas(processes, tmp_path, timeout_s=240)
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
    # The nodes met through the shared folder (the worker's hello, the primary's ready), no
    # private key was ever in it, and nothing of it is left.
    assert {"hello-1.json", "ready.json"} <= seen.shared_files
    assert not seen.private_keys, seen.private_keys
    assert not shared.exists()
    # The token reached a rank on each node, and no command line, log or file of the run.
    log = (tmp_path / "node0.log").read_text()
    assert {f"{SUBNET}.{n}: secrets from this node: HF_TOKEN" in log for n in (1, 2)} == {True}
    assert not seen.token_in_argv
    assert [
        p for p in tmp_path.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()
    ] == []
    # Nothing of the job's ssh setup is left on the nodes either.
    assert not (ssh_home / ".ssh" / "config").exists()
    assert set(private.iterdir()) <= earlier


@dataclass
class _Seen:
    shared_files: set[str] = field(default_factory=set)
    private_keys: set[str] = field(default_factory=set)
    token_in_argv: list[str] = field(default_factory=list)


def _watch_while_running(processes: list[subprocess.Popen[bytes]], shared: Path) -> _Seen:
    """Until both nodes exit: every process's command line, and every file in the shared
    folder, looked at a few times a second."""
    seen = _Seen()
    deadline = time.monotonic() + 240
    while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                if TOKEN.encode() in cmdline.read_bytes():
                    seen.token_in_argv.append(str(cmdline))
        for path in shared.glob("*") if shared.is_dir() else ():
            seen.shared_files.add(path.name)
            with contextlib.suppress(OSError):
                if b"PRIVATE KEY" in path.read_bytes() or TOKEN.encode() in path.read_bytes():
                    seen.private_keys.add(path.name)
        time.sleep(0.2)
    return seen
