"""Which wheels the bundle carries: the closure for the GPU machine's Python, not this one's,
without torch and what the machine has; and which wheel files that machine installs."""

import pytest

from llm_pipeline.bundle.wheels import Target, extra_requirements, select
from llm_pipeline.errors import BundleError
from llm_pipeline.lockfile import Pin

TARGET = Target(python="3.12", machine="x86_64")


def _pins(*names: str) -> dict[str, Pin]:
    return {name: Pin(name, "1.0", None, ("sha256:0",)) for name in names}


ROOT = [
    "transformers>=5",
    "deepspeed>=0.19",
    "backport>=1; python_version < '3.12'",  # this test's Python is 3.11: the target's counts
    "newer>=1; python_version >= '3.12'",
    "numpy>=1.26",
    "nvidia-ml-py>=12; extra == 'cuda'",
    "gcp-only>=1; extra == 'gcp'",
]
REQUIRES = {
    "transformers": ["tokenizers>=0.20", "numpy>=1.17", "win-only; sys_platform == 'win32'"],
    "deepspeed": ["torch", "hjson", "nvidia-cublas; platform_machine == 'x86_64'"],
    "tokenizers": [],
    "hjson": [],
    "nvidia-ml-py": [],
}


def test_the_closure_is_the_targets_without_torch_and_what_the_machine_has() -> None:
    pins = _pins(*REQUIRES, "newer", "backport", "gcp-only", "win-only")
    chosen = select(ROOT, ["cuda"], pins, TARGET, machine_has=["NumPy"], requires=REQUIRES)
    assert sorted(chosen.pins) == [
        "deepspeed", "hjson", "newer", "nvidia-ml-py", "tokenizers", "transformers",
    ]  # fmt: skip
    assert chosen.machine_own == {"torch", "nvidia-cublas", "numpy"}
    assert chosen.unexpanded == {"newer"}  # not installed here: carried, requirements unread


def test_a_package_the_lock_lacks_is_refused_by_name() -> None:
    with pytest.raises(BundleError, match=r"requirements.lock lacks hjson\b.*make lock"):
        select(
            ROOT, [], _pins("transformers", "deepspeed", "tokenizers"), TARGET, requires=REQUIRES
        )


def test_an_extras_requirements_less_those_left_out() -> None:
    lines = [
        "kfp>=2.17",
        'fastapi>=0.110; extra == "serving"',
        'gcsfs>=2024.6; extra == "serving"',
        'gcsfs>=2024.6; extra == "gcp"',
    ]
    assert extra_requirements(lines, "serving", ["GCSFS"]) == ["fastapi>=0.110"]


@pytest.mark.parametrize(
    ("wheel", "installs"),
    [
        ("pydantic_core-2.50.4-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", True),
        ("pyarrow-26.0.1-cp312-cp312-manylinux_2_28_x86_64.whl", True),
        ("tokenizers-0.23.3-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("transformers-5.23.0-py3-none-any.whl", True),
        ("multiprocess-0.70.19-py312-none-any.whl", True),
        ("pydantic_core-2.50.4-cp311-cp311-manylinux2014_x86_64.whl", False),  # this Python's
        ("multiprocess-0.70.19-py311-none-any.whl", False),
        ("regex-2026.1.1-cp312-cp312-manylinux_2_39_x86_64.whl", False),  # glibc too new
        ("regex-2026.1.1-cp312-cp312-manylinux2014_aarch64.whl", False),
        ("regex-2026.1.1-cp312-cp312-macosx_11_0_arm64.whl", False),
    ],
)
def test_which_wheel_files_the_machine_installs(wheel: str, installs: bool) -> None:
    assert TARGET.accepts(wheel) is installs
