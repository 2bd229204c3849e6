"""requirements.lock: what `make install` (so CI and a user's clone) and the images install.

The environment running these tests is the one `make install` made from the lock; these
tests say it holds exactly the locked versions, and that the lock covers setup.py whole.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from llm_pipeline.lockfile import (
    TORCH_VERSION,
    installed_versions,
    is_platform_package,
    lock_mismatches,
    parse_lock,
    read_lock,
)

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.lock"


def setup_requirements() -> list[Requirement]:
    """CORE and every extra of setup.py, read from its source (not from installed metadata,
    which could be older than the file)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    found: dict[str, object] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("CORE", "EXTRAS"):
            assert isinstance(node, ast.Assign)
            found[target.id] = ast.literal_eval(node.value)
    core, extras = found["CORE"], found["EXTRAS"]
    assert isinstance(core, list) and isinstance(extras, dict)
    return [Requirement(line) for line in [*core, *(r for rs in extras.values() for r in rs)]]


def makefile_variable(name: str) -> str:
    (value,) = re.findall(rf"^{name} :?= (.*(?:\\\n.*)*)$", (REPO / "Makefile").read_text(), re.M)
    return " ".join(value.replace("\\\n", " ").split())


def test_this_environment_holds_exactly_the_locked_versions() -> None:
    """A fresh clone's `make install`: every locked package at its version, nothing else but
    pip, this package and torch's platform build."""
    problems = lock_mismatches(
        read_lock(LOCK), installed_versions(), allowed_extra=("pip", "llm-pipeline")
    )

    assert problems == [], "\n".join(problems) + "\n(run `make install`, or `make lock`)"


def test_every_requirement_of_setup_py_is_locked_within_its_range() -> None:
    pins = read_lock(LOCK)

    for requirement in setup_requirements():
        name = canonicalize_name(requirement.name)
        if name == "torch":
            assert requirement.specifier.contains(TORCH_VERSION), requirement
            continue
        assert name in pins, f"{requirement} is not in requirements.lock: run `make lock`"
        assert requirement.specifier.contains(pins[name].version, prereleases=True), (
            f"{requirement}: the lock has {pins[name].version}; run `make lock`"
        )


def test_torch_is_the_pinned_cpu_build_and_no_cuda_wheel_came_with_the_lock() -> None:
    import torch

    assert torch.__version__.split("+")[0] == TORCH_VERSION
    assert torch.version.cuda is None, f"a CUDA build of torch is installed: {torch.__version__}"
    installed = installed_versions()
    cuda_wheels = sorted(
        name for name in installed if is_platform_package(name) and name != "torch"
    )
    assert cuda_wheels == []


def test_the_lock_leaves_torch_and_its_cuda_wheels_to_each_platform() -> None:
    pins = read_lock(LOCK)

    assert sorted(name for name in pins if is_platform_package(name)) == []
    left_out = makefile_variable("LOCK_PLATFORM").split()
    assert "torch" in left_out and not set(map(canonicalize_name, left_out)) & set(pins)
    assert "lockfile.py" in makefile_variable("TORCH_VERSION")  # one place for the version


def test_every_entry_is_pinned_and_hashed() -> None:
    pins = read_lock(LOCK)

    assert all(
        pin.hashes and all(h.startswith("sha256:") for h in pin.hashes) for pin in pins.values()
    )
    assert "make lock" in LOCK.read_text().splitlines()[1]


@pytest.mark.parametrize(
    "entry",
    [
        "six>=1.16 \\\n    --hash=sha256:00\n",
        "six==1.17.0\n",
        "six==1.17.0 ; python_version < '3' \n",
    ],
)
def test_an_entry_pip_would_refuse_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match=re.escape("is not `name==version --hash=...`")):
        parse_lock(entry)


def test_a_marker_limits_an_entry_to_its_platform() -> None:
    pins = parse_lock(
        "colorama==0.4.6 ; sys_platform == 'win32' \\\n    --hash=sha256:aa\n"
        "six==1.17.0 \\\n    --hash=sha256:bb \\\n    --hash=sha256:cc\n    # via x\n"
    )

    assert not pins["colorama"].applies({"sys_platform": "linux"})
    assert pins["six"].hashes == ("sha256:bb", "sha256:cc") and pins["six"].applies()
    assert lock_mismatches(pins, {"six": "1.17.0"}, environment={"sys_platform": "linux"}) == []
    assert lock_mismatches(
        pins, {"six": "1.16.0", "extra-pkg": "1"}, environment={"sys_platform": "win32"}
    ) == [
        "colorama: locked at 0.4.6, not installed",
        "six: locked at 1.17.0, installed 1.16.0",
        "extra-pkg: installed (1) but not in the lock",
    ]


def test_vendored_copies_are_not_installed_packages_once_setuptools_is_imported() -> None:
    """Importing setuptools (torch's extension builder does, for DeepSpeed's ops) puts its
    `_vendor` folder on sys.path; the environment check must still see only what pip
    installed, whichever test ran first in the process."""
    import setuptools

    vendor = Path(setuptools.__file__).parent / "_vendor"
    vendored = installed_versions([str(vendor)])
    assert vendored, f"setuptools vendors no distributions in {vendor}"
    assert str(vendor) in sys.path
    installed = installed_versions()
    assert not (set(vendored) - set(read_lock(LOCK))) & set(installed)
