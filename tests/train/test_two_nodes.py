"""Two nodes for real: two network namespaces joined by a veth pair, one replica in each.

Each replica runs the finetune step's library entry point with a Vertex-style CLUSTER_SPEC
naming the other; they rendezvous over the veth link and train one ZeRO-3 job over gloo.
Each node gets its own checkpoint folder (as separate VMs have separate disks), so the
node-local checkpoint path runs too: each node keeps and marks its own shards.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.train.checkpoints import MARKER

from .two_nodes import assert_one_job_of_two_nodes, run_two_replicas

pytestmark = pytest.mark.slow

SUBNET = "10.213.47"
IFNAME = "lpnode0"
PORT = 29517


def test_two_nodes_train_one_job_over_a_veth_link(
    two_namespaces: tuple[str, str],
    tokenized_docstrings: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Callable[..., TrainConfig],
) -> None:
    primary, worker = run_two_replicas(
        two_namespaces,
        tmp_path,
        dataset_dir=tokenized_docstrings,
        address=(SUBNET, PORT),
        ifname=IFNAME,
        model=tiny_t5_model,
        train=train_settings(max_steps=6, save_steps=3),
        cluster={"processes": 1},
        # Separate VMs have separate disks: each node its own checkpoint folder.
        node_env=lambda node: {"AIP_CHECKPOINT_DIR": str(tmp_path / f"node{node}-checkpoints")},
        timeout_s=480,
    )
    assert_one_job_of_two_nodes(primary, worker, steps=6, batch=4)
    assert (tmp_path / "model" / "model.safetensors").is_file()
    for node in (0, 1):
        # Each node holds its own rank's ZeRO shard of the step-3 checkpoint, marked complete.
        checkpoint = next((tmp_path / f"node{node}-checkpoints").glob("run-*/checkpoint-3"))
        assert (checkpoint / MARKER).is_file()
        shards = sorted(p.name for p in checkpoint.glob("global_step3/*optim_states.pt"))
        assert shards == [f"zero_pp_rank_{node}_mp_rank_00_optim_states.pt"]
