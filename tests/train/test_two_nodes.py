"""Two nodes for real: two network namespaces joined by a veth pair, one replica in each.

Each replica runs the finetune step's library entry point with a Vertex-style CLUSTER_SPEC
naming the other; they rendezvous over the veth link and train one DeepSpeed job over gloo.
Each node gets its own checkpoint folder (as separate VMs have separate disks), so the
node-local checkpoint path runs too: each node keeps and marks its own copy, and each copy
must be one its node can resume from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.train.checkpoints import MARKER, complete_steps

from .two_nodes import start_two_replicas, wait_for_replicas

pytestmark = pytest.mark.slow

SUBNET = "10.213.47"
IFNAME = "lpnode0"
PORT = 29517
MAX_STEPS, SAVE_STEPS = 8, 3


def _node_folders(tmp_path: Path) -> list[Path]:
    return [next(iter((tmp_path / f"node{n}-checkpoints").glob("run-*")), tmp_path) for n in (0, 1)]


def _common_complete(tmp_path: Path) -> set[int]:
    return set.intersection(*(set(complete_steps(str(f))) for f in _node_folders(tmp_path)))


def _kill_trees(processes: list[psutil.Process]) -> None:
    """SIGKILL every process of both nodes at once, as when the VMs are taken away."""
    everything = [*processes, *(c for p in processes for c in p.children(recursive=True))]
    for process in everything:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(everything, timeout=30)


def test_two_nodes_without_shared_storage_resume_after_a_kill(
    two_namespaces: tuple[str, str],
    tokenized_docstrings: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Callable[..., TrainConfig],
) -> None:
    options = {
        "dataset_dir": tokenized_docstrings,
        "address": (SUBNET, PORT),
        "ifname": IFNAME,
        "model": tiny_t5_model,
        # ZeRO-2: besides `latest`, its module and scheduler state are a file DeepSpeed writes
        # on one rank only, so both must reach every node's copy.
        "train": train_settings(max_steps=MAX_STEPS, save_steps=SAVE_STEPS, zero_stage=2),
        "cluster": {"processes": 1},
        # Separate VMs have separate disks: each node its own checkpoint folder.
        "node_env": lambda node: {"AIP_CHECKPOINT_DIR": str(tmp_path / f"node{node}-checkpoints")},
    }
    first = start_two_replicas(two_namespaces, tmp_path, **options)
    try:
        deadline = time.monotonic() + 300
        while not _common_complete(tmp_path) and time.monotonic() < deadline:
            assert all(p.poll() is None for p in first), "a node ended before its first save"
            time.sleep(0.05)
        _kill_trees([psutil.Process(p.pid) for p in first])
    finally:
        for process in first:
            process.kill()
            process.wait()
    saved = max(_common_complete(tmp_path))
    assert saved < MAX_STEPS
    for node, folder in enumerate(_node_folders(tmp_path)):
        # Each node holds what it needs to load step 3 on its own: DeepSpeed's tag, the module
        # state, and its own rank's optimizer shard only.
        checkpoint = folder / f"checkpoint-{SAVE_STEPS}"
        assert (checkpoint / MARKER).is_file()
        assert (checkpoint / "latest").read_text() == f"global_step{SAVE_STEPS}"
        step_folder = checkpoint / f"global_step{SAVE_STEPS}"
        assert (step_folder / "mp_rank_00_model_states.pt").is_file()
        shards = sorted(p.name for p in step_folder.glob("*optim_states.pt"))
        assert shards == [f"zero_pp_rank_{node}_mp_rank_00_optim_states.pt"]

    primary, worker = wait_for_replicas(
        start_two_replicas(two_namespaces, tmp_path, **options), tmp_path, timeout_s=300
    )

    assert primary["node_count"] == 2 and not worker["is_primary"]
    metrics = primary["metrics"]
    assert metrics["world_size"] == 2 and metrics["global_step"] == MAX_STEPS
    assert metrics["resumed_from_step"] == saved
    assert metrics["train_samples"] == (MAX_STEPS - saved) * 2 * 4
    logged = [entry["step"] for entry in primary["log_history"] if "loss" in entry]
    assert logged == list(range(1, MAX_STEPS + 1))
    assert (tmp_path / "model" / "model.safetensors").is_file()
