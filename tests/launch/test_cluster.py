"""Cluster detection from real-shaped environments: each maps to one whole ClusterInfo."""

from __future__ import annotations

import json

import pytest

from llm_pipeline.launch.cluster import ClusterInfo, NotATrainingNode, detect_cluster


def vertex_spec(workers: int, task_type: str, index: int, **extra_pools: object) -> str:
    """A CLUSTER_SPEC as Vertex writes it for a job of 1 primary and `workers` workers."""
    cluster: dict[str, object] = {"workerpool0": ["cmle-training-workerpool0-4c1d6d97d0-0:2222"]}
    if workers:
        cluster["workerpool1"] = [
            f"cmle-training-workerpool1-4c1d6d97d0-{i}:2222" for i in range(workers)
        ]
    cluster.update(extra_pools)
    return json.dumps(
        {
            "cluster": cluster,
            "environment": "cloud",
            "task": {"type": task_type, "index": index},
            "job": '{"python_module":"","package_uris":[],"job_args":[]}',
            "open_ports": [3333],
        }
    )


PRIMARY = "cmle-training-workerpool0-4c1d6d97d0-0"
WORKER = "cmle-training-workerpool1-4c1d6d97d0-{}"
REDUCTION_SERVERS = {
    "workerpool2": [
        "cmle-training-workerpool2-4c1d6d97d0-0:2222",
        "cmle-training-workerpool2-4c1d6d97d0-1:2222",
    ]
}


def vertex(node_rank: int, node_count: int) -> ClusterInfo:
    return ClusterInfo(
        node_rank=node_rank,
        node_count=node_count,
        master_addr=PRIMARY,
        master_port=2222,
        procs_per_node=8,
        hosts=(PRIMARY, *(WORKER.format(i) for i in range(node_count - 1))),
        source="vertex",
    )


@pytest.mark.parametrize(
    ("workers", "task_type", "index", "expected"),
    [
        pytest.param(0, "workerpool0", 0, vertex(0, 1), id="1-node"),
        pytest.param(1, "workerpool0", 0, vertex(0, 2), id="2-nodes-primary"),
        pytest.param(1, "workerpool1", 0, vertex(1, 2), id="2-nodes-worker"),
        pytest.param(3, "workerpool0", 0, vertex(0, 4), id="4-nodes-primary"),
        pytest.param(3, "workerpool1", 2, vertex(3, 4), id="4-nodes-last-worker"),
    ],
)
def test_vertex_cluster_spec(workers: int, task_type: str, index: int, expected: ClusterInfo):
    env = {"CLUSTER_SPEC": vertex_spec(workers, task_type, index)}
    assert detect_cluster(env, procs_per_node=8) == expected


def test_vertex_reduction_server_pool_is_not_counted():
    env = {"CLUSTER_SPEC": vertex_spec(3, "workerpool1", 0, **REDUCTION_SERVERS)}
    assert detect_cluster(env, procs_per_node=8) == vertex(1, 4)


def test_vertex_reduction_server_replica_is_told_it_does_not_train():
    env = {"CLUSTER_SPEC": vertex_spec(1, "workerpool2", 1, **REDUCTION_SERVERS)}
    with pytest.raises(NotATrainingNode, match=r"workerpool2\[1\].*not a training node") as err:
        detect_cluster(env, procs_per_node=8)
    assert (err.value.pool, err.value.index) == ("workerpool2", 1)


def test_vertex_wins_over_sagemaker_and_generic():
    env = {
        "CLUSTER_SPEC": vertex_spec(1, "workerpool1", 0),
        "SM_HOSTS": '["algo-1"]',
        "SM_CURRENT_HOST": "algo-1",
        "MASTER_ADDR": "10.0.0.9",
        "NNODES": "7",
    }
    assert detect_cluster(env, procs_per_node=8) == vertex(1, 2)


def test_vertex_address_without_port_uses_torch_default():
    spec = {"cluster": {"workerpool0": ["primary"]}, "task": {"type": "workerpool0", "index": 0}}
    assert detect_cluster({"CLUSTER_SPEC": json.dumps(spec)}, procs_per_node=1) == ClusterInfo(
        node_rank=0,
        node_count=1,
        master_addr="primary",
        master_port=29500,
        procs_per_node=1,
        hosts=("primary",),
        source="vertex",
    )


@pytest.mark.parametrize(
    ("current", "expected_rank"), [("algo-1", 0), ("algo-2", 1), ("algo-3", 2)]
)
def test_sagemaker(current: str, expected_rank: int):
    env = {
        # Unsorted on purpose: the primary is the first host in sorted order.
        "SM_HOSTS": '["algo-2", "algo-1", "algo-3"]',
        "SM_CURRENT_HOST": current,
        "SM_NUM_GPUS": "4",
    }
    assert detect_cluster(env, procs_per_node=1) == ClusterInfo(
        node_rank=expected_rank,
        node_count=3,
        master_addr="algo-1",
        master_port=29500,
        procs_per_node=4,
        hosts=("algo-1", "algo-2", "algo-3"),
        source="sagemaker",
    )


def test_sagemaker_cpu_instance_keeps_callers_process_count_and_reads_master_port():
    env = {
        "SM_HOSTS": '["algo-1"]',
        "SM_CURRENT_HOST": "algo-1",
        "SM_NUM_GPUS": "0",
        "MASTER_PORT": "7777",
    }
    assert detect_cluster(env, procs_per_node=2) == ClusterInfo(
        node_rank=0,
        node_count=1,
        master_addr="algo-1",
        master_port=7777,
        procs_per_node=2,
        hosts=("algo-1",),
        source="sagemaker",
    )


@pytest.mark.parametrize(
    ("env", "expected_rank", "expected_count"),
    [
        ({"NNODES": "4", "NODE_RANK": "3"}, 3, 4),
        # A Kubeflow PyTorchJob pod: WORLD_SIZE and RANK count pods, one pod per node.
        ({"WORLD_SIZE": "2", "RANK": "1"}, 1, 2),
        # NNODES/NODE_RANK win over WORLD_SIZE/RANK when both are there.
        ({"NNODES": "2", "NODE_RANK": "0", "WORLD_SIZE": "16", "RANK": "9"}, 0, 2),
    ],
)
def test_generic(env: dict[str, str], expected_rank: int, expected_count: int):
    env = {"MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "23456", **env}
    assert detect_cluster(env, procs_per_node=8) == ClusterInfo(
        node_rank=expected_rank,
        node_count=expected_count,
        master_addr="10.0.0.2",
        master_port=23456,
        procs_per_node=8,
        hosts=(),
        source="generic",
    )


def test_generic_single_node_without_master_addr():
    assert detect_cluster({"NNODES": "1"}, procs_per_node=2) == ClusterInfo(
        node_rank=0,
        node_count=1,
        master_addr="127.0.0.1",
        master_port=29500,
        procs_per_node=2,
        hosts=(),
        source="generic",
    )


def test_nothing_set_is_a_single_node():
    assert detect_cluster({"HOME": "/root"}, procs_per_node=2) == ClusterInfo(
        node_rank=0,
        node_count=1,
        master_addr="127.0.0.1",
        master_port=29500,
        procs_per_node=2,
        hosts=("localhost",),
        source="single",
    )


def test_info_properties():
    info = vertex(0, 4)
    assert (info.is_primary, info.world_size) == (True, 32)
    assert vertex(2, 4).is_primary is False


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CLUSTER_SPEC": "{not json"}, r"^CLUSTER_SPEC: not valid JSON \(.*line 1 column 2"),
        ({"CLUSTER_SPEC": "[1]"}, r"^CLUSTER_SPEC: expected a JSON object, got list"),
        (
            {"CLUSTER_SPEC": '{"task": {"type": "workerpool0", "index": 0}}'},
            r"^CLUSTER_SPEC: 'cluster' must be an object",
        ),
        (
            {"CLUSTER_SPEC": '{"cluster": {"workerpool0": ["a:1"]}}'},
            r"^CLUSTER_SPEC: 'task' must be an object",
        ),
        (
            {"CLUSTER_SPEC": vertex_spec(0, "workerpool0", 0, workerpool0=["a:1", "b:1"])},
            r"^CLUSTER_SPEC: cluster.workerpool0 must hold exactly one address .* got 2",
        ),
        (
            {"CLUSTER_SPEC": vertex_spec(0, "workerpool0", 0, workerpool1="x:1")},
            r"^CLUSTER_SPEC: cluster.workerpool1 must be a list of 'host:port' strings",
        ),
        (
            {"CLUSTER_SPEC": vertex_spec(1, "chief", 0)},
            r"^CLUSTER_SPEC: task.type must be one of .* got 'chief'",
        ),
        (
            {"CLUSTER_SPEC": vertex_spec(1, "workerpool1", -1)},
            r"^CLUSTER_SPEC: task.index must be an integer >= 0, got -1",
        ),
        (
            {"CLUSTER_SPEC": vertex_spec(1, "workerpool1", 1)},
            r"^CLUSTER_SPEC: task.index 1 is out of range for cluster.workerpool1 \(1 replicas\)",
        ),
        (
            {"CLUSTER_SPEC": vertex_spec(0, "workerpool0", 0, workerpool0=["host:http"])},
            r"^CLUSTER_SPEC: malformed address 'host:http', expected 'host:port'",
        ),
        ({"SM_HOSTS": "algo-1", "SM_CURRENT_HOST": "algo-1"}, r"^SM_HOSTS: not valid JSON"),
        ({"SM_HOSTS": "[]", "SM_CURRENT_HOST": "algo-1"}, r"^SM_HOSTS: expected a non-empty"),
        (
            {"SM_HOSTS": '["algo-1", "algo-1"]', "SM_CURRENT_HOST": "algo-1"},
            r"^SM_HOSTS: host names must be unique",
        ),
        (
            {"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-9"},
            r"^SM_CURRENT_HOST: 'algo-9' is not one of SM_HOSTS \['algo-1'\]",
        ),
        ({"SM_HOSTS": '["algo-1"]'}, r"^SM_CURRENT_HOST: '' is not one of SM_HOSTS"),
        (
            {"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-1", "SM_NUM_GPUS": "eight"},
            r"^SM_NUM_GPUS: expected an integer, got 'eight'",
        ),
        ({"NNODES": "two", "MASTER_ADDR": "h"}, r"^NNODES: expected an integer, got 'two'"),
        ({"NNODES": "0", "MASTER_ADDR": "h"}, r"^NNODES: must be >= 1, got 0"),
        ({"NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "h"}, r"^NODE_RANK: 2 must be < NNODES"),
        ({"WORLD_SIZE": "2", "RANK": "-1", "MASTER_ADDR": "h"}, r"^RANK: must be >= 0, got -1"),
        ({"NNODES": "2", "NODE_RANK": "1"}, r"^MASTER_ADDR: required when NNODES is 2"),
        ({"MASTER_ADDR": "h", "MASTER_PORT": "70000"}, r"^MASTER_PORT: must be a TCP port"),
        (
            {"MASTER_ADDR": "h", "WORLD_SIZE": "2", "RANK": "1", "TORCHELASTIC_RUN_ID": "x"},
            r"inside a torchrun worker",
        ),
    ],
)
def test_malformed_values_name_the_variable(env: dict[str, str], message: str):
    with pytest.raises(ValueError, match=message):
        detect_cluster(env, procs_per_node=1)


def test_procs_per_node_must_be_positive():
    with pytest.raises(ValueError, match="procs_per_node: must be >= 1, got 0"):
        detect_cluster({}, procs_per_node=0)
