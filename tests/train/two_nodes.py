"""Two replicas of the finetune step, one in each network namespace of `two_namespaces`,
started as Vertex starts a two-pool job, and what such a run must report.

Shared by the torchrun and the DeepSpeed-launcher two-node tests: only the launcher, the
checkpoint folders and the job id differ between them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from llm_pipeline.config import ModelConfig, TrainConfig

DRIVER = Path(__file__).with_name("node_driver.py")


def start_two_replicas(
    namespaces: tuple[str, str],
    tmp_path: Path,
    *,
    dataset_dir: Path,
    address: tuple[str, int],
    ifname: str,
    model: ModelConfig,
    train: TrainConfig,
    cluster: Mapping[str, Any],
    node_env: Callable[[int], Mapping[str, str]],
) -> list[subprocess.Popen[bytes]]:
    """Start node 0 (workerpool0) and node 1 (workerpool1); their driver processes.

    `address` is the subnet's first three octets and the rendezvous port; `node_env(node)`
    adds what differs per node (checkpoint folder, job id). Each node logs to `node<N>.log`
    and writes its result to `result-<N>.json` in `tmp_path`.
    """
    subnet, port = address
    pools = {"workerpool0": [f"{subnet}.1:{port}"], "workerpool1": [f"{subnet}.2:{port}"]}
    tasks = [{"type": "workerpool0", "index": 0}, {"type": "workerpool1", "index": 0}]
    job = {
        "dataset_dir": str(dataset_dir),
        "output_dir": str(tmp_path / "model"),
        "model": model.model_dump(mode="json"),
        "train": train.model_dump(mode="json"),
        "cluster": dict(cluster),
    }
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for node, (namespace, task) in enumerate(zip(namespaces, tasks, strict=True)):
            args_file = tmp_path / f"args-{node}.json"
            args_file.write_text(
                json.dumps({**job, "result": str(tmp_path / f"result-{node}.json")})
            )
            env = dict(os.environ)
            env.update(
                CLUSTER_SPEC=json.dumps({"cluster": pools, "task": task, "environment": "cloud"}),
                # gloo binds to the address the host name resolves to, which is outside the
                # namespace; name the interface, as one does with NCCL_SOCKET_IFNAME.
                GLOO_SOCKET_IFNAME=ifname,
                **node_env(node),
            )
            command = ["ip", "netns", "exec", namespace, sys.executable, str(DRIVER)]
            with (tmp_path / f"node{node}.log").open("w") as log:
                processes.append(
                    subprocess.Popen(
                        [*command, str(args_file)], env=env, stdout=log, stderr=subprocess.STDOUT
                    )
                )
    except BaseException:
        for process in processes:
            process.kill()
        raise
    return processes


def wait_for_replicas(
    processes: list[subprocess.Popen[bytes]], tmp_path: Path, *, timeout_s: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both nodes' results once they exit; fails with their last output if either failed.
    Kills whatever is still running when the wait ends."""
    try:
        codes = [p.wait(timeout=timeout_s) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    logs = [(tmp_path / f"node{n}.log").read_text()[-4000:] for n in range(2)]
    assert codes == [0, 0], logs
    primary, worker = (json.loads((tmp_path / f"result-{n}.json").read_text()) for n in (0, 1))
    return primary, worker


def run_two_replicas(
    namespaces: tuple[str, str],
    tmp_path: Path,
    *,
    timeout_s: float,
    **options: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run both nodes to the end (`start_two_replicas`' options); their results."""
    processes = start_two_replicas(namespaces, tmp_path, **options)
    return wait_for_replicas(processes, tmp_path, timeout_s=timeout_s)


def assert_one_job_of_two_nodes(
    primary: dict[str, Any], worker: dict[str, Any], *, steps: int, batch: int
) -> None:
    """Both nodes trained one job: the primary reports it, the worker writes nothing."""
    assert primary["is_primary"] and primary["node_count"] == 2
    assert primary["metrics"]["world_size"] == 2 and primary["metrics"]["global_step"] == steps
    assert primary["metrics"]["train_samples"] == steps * 2 * batch
    assert not worker["is_primary"] and worker["node_rank"] == 1 and worker["output_dir"] is None
