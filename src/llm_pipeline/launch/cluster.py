"""Which node of which cluster this replica is, read from the environment it was started in.

Every replica of a multi-node job runs the same finetune step; this module tells each one its
node rank, the node count and the primary's address, so that the launcher can start `torchrun`
(or write DeepSpeed's hostfile) the same way on Vertex AI, SageMaker, a Kubeflow PyTorchJob or
a laptop. Sources, first match wins: Vertex `CLUSTER_SPEC`, SageMaker `SM_HOSTS`, the generic
torch variables, and otherwise a single node.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# torch.distributed's own default, so a generic cluster without MASTER_PORT behaves as torchrun.
DEFAULT_MASTER_PORT = 29500

# Vertex's worker pools by position: 0 is the primary (exactly one replica), 1 the workers,
# 2 parameter or Reduction Server replicas, 3 evaluators. Only 0 and 1 train.
_VERTEX_PRIMARY = "workerpool0"
_VERTEX_WORKERS = "workerpool1"
_VERTEX_POOLS = ("workerpool0", "workerpool1", "workerpool2", "workerpool3")

_GENERIC_VARS = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "WORLD_SIZE", "NODE_RANK", "RANK")


@dataclass(frozen=True)
class ClusterInfo:
    """The training cluster as seen from one node (one replica), before any process starts."""

    node_rank: int
    node_count: int
    master_addr: str
    master_port: int
    procs_per_node: int
    # Every training node's hostname in node-rank order where the environment lists them
    # (Vertex, SageMaker, single node); empty where it does not (generic variables).
    hosts: tuple[str, ...]
    # Where this came from: "vertex", "sagemaker", "generic" or "single".
    source: str

    @property
    def is_primary(self) -> bool:
        """Only the primary writes the step's output artifacts."""
        return self.node_rank == 0

    @property
    def world_size(self) -> int:
        return self.node_count * self.procs_per_node


class NotATrainingNode(Exception):
    """This replica belongs to a pool that does not train (Reduction Server, evaluator).

    Not a ValueError: the environment is valid, this replica simply has no part in training, so
    the caller decides whether to exit quietly or fail.
    """

    def __init__(self, pool: str, index: int) -> None:
        self.pool = pool
        self.index = index
        super().__init__(
            f"CLUSTER_SPEC: this replica is {pool}[{index}], which is not a training node "
            f"(only {_VERTEX_PRIMARY}, the primary, and {_VERTEX_WORKERS}, the workers, train; "
            "workerpool2 is for Reduction Server or parameter servers, workerpool3 for evaluators)"
        )


def detect_cluster(env: Mapping[str, str], *, procs_per_node: int) -> ClusterInfo:
    """Read the cluster from `env` (pass `os.environ`); `procs_per_node` is the GPUs this node sees.

    Call it in the replica's own process, before `torchrun`: inside a torchrun worker,
    WORLD_SIZE and RANK count processes, not nodes.

    Raises ValueError naming the variable when a value is malformed, and NotATrainingNode on a
    Vertex replica outside the training pools.
    """
    if procs_per_node < 1:
        raise ValueError(f"procs_per_node: must be >= 1, got {procs_per_node}")
    if env.get("CLUSTER_SPEC", "").strip():
        return _from_vertex(env, procs_per_node)
    if "SM_HOSTS" in env or "SM_CURRENT_HOST" in env:
        return _from_sagemaker(env, procs_per_node)
    if any(name in env for name in _GENERIC_VARS):
        if "TORCHELASTIC_RUN_ID" in env:
            raise ValueError(
                "detect_cluster: called inside a torchrun worker (TORCHELASTIC_RUN_ID is set), "
                "where WORLD_SIZE and RANK count processes, not nodes; call it before launching"
            )
        return _from_generic(env, procs_per_node)
    return ClusterInfo(
        node_rank=0,
        node_count=1,
        master_addr="127.0.0.1",
        master_port=DEFAULT_MASTER_PORT,
        procs_per_node=procs_per_node,
        hosts=("localhost",),
        source="single",
    )


def _from_vertex(env: Mapping[str, str], procs_per_node: int) -> ClusterInfo:
    """Vertex AI custom jobs: `CLUSTER_SPEC` JSON with `cluster` pools and this replica's `task`.

    Example: {"cluster": {"workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
    "workerpool1": ["cmle-training-workerpool1-ab-0:2222"]}, "environment": "cloud",
    "task": {"type": "workerpool1", "index": 0}}.
    """
    spec = _json_var(env, "CLUSTER_SPEC")
    if not isinstance(spec, dict):
        raise ValueError(f"CLUSTER_SPEC: expected a JSON object, got {type(spec).__name__}")
    cluster = spec.get("cluster")
    task = spec.get("task")
    if not isinstance(cluster, dict):
        raise ValueError("CLUSTER_SPEC: 'cluster' must be an object of worker pools")
    if not isinstance(task, dict):
        raise ValueError("CLUSTER_SPEC: 'task' must be an object with 'type' and 'index'")

    pools = {name: _vertex_pool(cluster, name) for name in _VERTEX_POOLS}
    primary, workers = pools[_VERTEX_PRIMARY], pools[_VERTEX_WORKERS]
    if len(primary) != 1:
        raise ValueError(
            f"CLUSTER_SPEC: cluster.{_VERTEX_PRIMARY} must hold exactly one address "
            f"(the primary replica), got {len(primary)}"
        )

    task_type, index = task.get("type"), task.get("index")
    if task_type not in _VERTEX_POOLS:
        raise ValueError(
            f"CLUSTER_SPEC: task.type must be one of {_VERTEX_POOLS}, got {task_type!r}"
        )
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ValueError(f"CLUSTER_SPEC: task.index must be an integer >= 0, got {index!r}")
    if index >= len(pools[task_type]):
        raise ValueError(
            f"CLUSTER_SPEC: task.index {index} is out of range for cluster.{task_type} "
            f"({len(pools[task_type])} replicas)"
        )
    if task_type not in (_VERTEX_PRIMARY, _VERTEX_WORKERS):
        raise NotATrainingNode(task_type, index)

    training = [_split_host_port(addr, "CLUSTER_SPEC") for addr in primary + workers]
    master_addr, master_port = training[0]
    return ClusterInfo(
        # The primary is node 0, so worker i of workerpool1 is node i + 1.
        node_rank=0 if task_type == _VERTEX_PRIMARY else index + 1,
        node_count=len(training),
        master_addr=master_addr,
        master_port=master_port if master_port is not None else DEFAULT_MASTER_PORT,
        procs_per_node=procs_per_node,
        hosts=tuple(host for host, _ in training),
        source="vertex",
    )


def _vertex_pool(cluster: dict[str, Any], name: str) -> list[str]:
    pool = cluster.get(name, [])
    if not isinstance(pool, list) or not all(isinstance(a, str) and a for a in pool):
        raise ValueError(f"CLUSTER_SPEC: cluster.{name} must be a list of 'host:port' strings")
    return pool


def _from_sagemaker(env: Mapping[str, str], procs_per_node: int) -> ClusterInfo:
    """SageMaker training: hosts as a JSON list, the primary is the first in sorted order.

    SageMaker documents `hosts` as sorted lexicographically and its training toolkit takes
    hosts[0] as the master; sorting again keeps that true even if the list arrives unsorted.
    """
    hosts_value = _json_var(env, "SM_HOSTS")
    if (
        not isinstance(hosts_value, list)
        or not hosts_value
        or not all(isinstance(h, str) and h for h in hosts_value)
    ):
        raise ValueError(
            f"SM_HOSTS: expected a non-empty JSON list of host names, got {hosts_value!r}"
        )
    hosts = tuple(sorted(hosts_value))
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"SM_HOSTS: host names must be unique, got {hosts_value!r}")
    current = env.get("SM_CURRENT_HOST", "")
    if current not in hosts:
        raise ValueError(f"SM_CURRENT_HOST: {current!r} is not one of SM_HOSTS {list(hosts)}")
    gpus = _int_var(env, "SM_NUM_GPUS", default=0, minimum=0)
    return ClusterInfo(
        node_rank=hosts.index(current),
        node_count=len(hosts),
        master_addr=hosts[0],
        master_port=_port_var(env, "MASTER_PORT"),
        # A CPU instance reports 0 GPUs; it still runs the caller's process count.
        procs_per_node=gpus if gpus > 0 else procs_per_node,
        hosts=hosts,
        source="sagemaker",
    )


def _from_generic(env: Mapping[str, str], procs_per_node: int) -> ClusterInfo:
    """torch-style variables, as a Kubeflow PyTorchJob sets them per pod (one pod per node)."""
    count_var = "NNODES" if "NNODES" in env else "WORLD_SIZE"
    rank_var = "NODE_RANK" if "NODE_RANK" in env else "RANK"
    node_count = _int_var(env, count_var, default=1, minimum=1)
    node_rank = _int_var(env, rank_var, default=0, minimum=0)
    if node_rank >= node_count:
        raise ValueError(f"{rank_var}: {node_rank} must be < {count_var} ({node_count})")
    master_addr = env.get("MASTER_ADDR", "").strip()
    if not master_addr:
        if node_count > 1:
            raise ValueError(f"MASTER_ADDR: required when {count_var} is {node_count} (> 1)")
        master_addr = "127.0.0.1"
    return ClusterInfo(
        node_rank=node_rank,
        node_count=node_count,
        master_addr=master_addr,
        master_port=_port_var(env, "MASTER_PORT"),
        procs_per_node=procs_per_node,
        hosts=(),
        source="generic",
    )


def _json_var(env: Mapping[str, str], name: str) -> Any:
    try:
        return json.loads(env[name])
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}: not valid JSON ({err})") from None


def _int_var(env: Mapping[str, str], name: str, *, default: int, minimum: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")
    return value


def _port_var(env: Mapping[str, str], name: str) -> int:
    port = _int_var(env, name, default=DEFAULT_MASTER_PORT, minimum=1)
    if port > 65535:
        raise ValueError(f"{name}: must be a TCP port (1-65535), got {port}")
    return port


def _split_host_port(address: str, var: str) -> tuple[str, int | None]:
    """'host:2222' -> ('host', 2222); 'host' -> ('host', None)."""
    host, sep, port_text = address.rpartition(":")
    if not sep:
        return address, None
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{var}: malformed address {address!r}, expected 'host:port'")
    return host.strip("[]"), int(port_text)
