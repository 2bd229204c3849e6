"""Two nodes for real: two network namespaces joined by a veth pair, one replica in each.

Each replica runs the finetune step's library entry point with a Vertex-style CLUSTER_SPEC
naming the other; they rendezvous over the veth link and train one ZeRO-3 job over gloo.
Each node gets its own checkpoint folder (as separate VMs have separate disks), so the
node-local checkpoint path runs too: each node keeps and marks its own shards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.train.checkpoints import MARKER

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("node_driver.py")
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
    cluster = {
        "workerpool0": [f"{SUBNET}.1:{PORT}"],
        "workerpool1": [f"{SUBNET}.2:{PORT}"],
    }
    tasks = [{"type": "workerpool0", "index": 0}, {"type": "workerpool1", "index": 0}]
    processes = []
    for node, (namespace, task) in enumerate(zip(two_namespaces, tasks, strict=True)):
        args = {
            "dataset_dir": str(tokenized_docstrings),
            "output_dir": str(tmp_path / "model"),
            "model": tiny_t5_model.model_dump(mode="json"),
            "train": train_settings(max_steps=6, save_steps=3).model_dump(mode="json"),
            "cluster": {"processes": 1},
            "result": str(tmp_path / f"result-{node}.json"),
        }
        args_file = tmp_path / f"args-{node}.json"
        args_file.write_text(json.dumps(args))
        env = dict(os.environ)
        env.update(
            CLUSTER_SPEC=json.dumps({"cluster": cluster, "task": task, "environment": "cloud"}),
            # Separate VMs have separate disks: each node its own checkpoint folder.
            AIP_CHECKPOINT_DIR=str(tmp_path / f"node{node}-checkpoints"),
            # gloo binds to the address the host name resolves to, which is outside the
            # namespace; name the interface, as one does with NCCL_SOCKET_IFNAME on clusters.
            GLOO_SOCKET_IFNAME=IFNAME,
        )
        command = ["ip", "netns", "exec", namespace, sys.executable, str(DRIVER), str(args_file)]
        log = (tmp_path / f"node{node}.log").open("w")
        processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
    codes = [p.wait(timeout=480) for p in processes]
    logs = [(tmp_path / f"node{n}.log").read_text()[-3000:] for n in range(2)]
    assert codes == [0, 0], logs

    primary = json.loads((tmp_path / "result-0.json").read_text())
    worker = json.loads((tmp_path / "result-1.json").read_text())
    assert primary["is_primary"] and primary["node_count"] == 2
    assert primary["metrics"]["world_size"] == 2 and primary["metrics"]["global_step"] == 6
    assert primary["metrics"]["train_samples"] == 6 * 2 * 4
    assert not worker["is_primary"] and worker["node_rank"] == 1 and worker["output_dir"] is None
    assert (tmp_path / "model" / "model.safetensors").is_file()
    for node in (0, 1):
        # Each node holds its own rank's ZeRO shard of the step-3 checkpoint, marked complete.
        checkpoint = next((tmp_path / f"node{node}-checkpoints").glob("run-*/checkpoint-3"))
        assert (checkpoint / MARKER).is_file()
        shards = sorted(p.name for p in checkpoint.glob("global_step3/*optim_states.pt"))
        assert shards == [f"zero_pp_rank_{node}_mp_rank_00_optim_states.pt"]
