"""The table of Vertex machine types the fit check measures against."""

import pytest

from llm_pipeline.fit.machines import ACCELERATORS, UnknownMachine, this_machine, vertex_place
from llm_pipeline.fit.places import auto_dtype


def test_accelerator_optimized_machines_come_with_their_gpus():
    place = vertex_place("a2-megagpu-16g", "NVIDIA_TESLA_A100", 16, key="cluster")
    assert (place.host_gib, place.gpus, place.accelerator) == (
        1360,
        16,
        ACCELERATORS["NVIDIA_TESLA_A100"],
    )
    assert place.label == "a2-megagpu-16g (16 × A100 40GB)"
    assert vertex_place("a2-ultragpu-1g", "NVIDIA_A100_80GB", 1, key="deploy").host_gib == 170
    assert vertex_place("g2-standard-8", "NVIDIA_L4", 1, key="deploy").accelerator.memory_gib == 24


def test_n1_machines_take_the_older_gpus():
    place = vertex_place("n1-standard-8", "NVIDIA_TESLA_T4", 1, key="deploy")
    assert (place.host_gib, place.accelerator.memory_gib) == (30, 16)
    assert vertex_place("n1-highmem-16", None, 0, key="deploy").host_gib == 104


def test_bf16_only_from_compute_capability_8():
    def dtype(machine: str, gpu: str | None) -> str:
        return auto_dtype(vertex_place(machine, gpu, 1 if gpu else 0, key="deploy"))

    assert dtype("a2-highgpu-1g", "NVIDIA_TESLA_A100") == "bf16"
    assert dtype("g2-standard-4", "NVIDIA_L4") == "bf16"
    assert dtype("a3-highgpu-1g", "NVIDIA_H100_80GB") == "bf16"
    assert dtype("n1-standard-8", "NVIDIA_TESLA_T4") == "fp32"
    assert dtype("n1-standard-8", "NVIDIA_TESLA_V100") == "fp32"
    assert dtype("n1-standard-8", None) == "fp32"


@pytest.mark.parametrize(
    ("machine", "gpu", "message"),
    [
        (
            "a2-highgpu-1",
            "NVIDIA_TESLA_A100",
            "cluster.machine_type 'a2-highgpu-1' is not in the fit check's table of Vertex "
            "machine types; did you mean a2-highgpu-1g",
        ),
        (
            "a2-highgpu-1g",
            "NVIDIA_TESLA_T4",
            "cluster.accelerator_type 'NVIDIA_TESLA_T4': a2-highgpu-1g comes with 1 × "
            "NVIDIA_TESLA_A100 and takes no other GPU",
        ),
        (
            "n1-standard-8",
            "NVIDIA_TESLA_A100",
            "cluster.accelerator_type 'NVIDIA_TESLA_A100': n1-standard-8 takes no such GPU",
        ),
        ("n1-standard-8", "NVIDIA_TESLA_K9000", "is not a Vertex GPU the fit check knows"),
    ],
)
def test_unknown_or_impossible_machines_are_named(machine: str, gpu: str, message: str):
    with pytest.raises(UnknownMachine, match=None) as caught:
        vertex_place(machine, gpu, 1, key="cluster")
    assert message in str(caught.value)


def test_this_machine_has_some_memory():
    place = this_machine()
    assert place.accelerator is None and 0.5 < place.host_gib < 1 << 20
