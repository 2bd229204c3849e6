"""Which wheels the bundle carries: the closure for the GPU machine's Python, not this one's,
without torch and what the machine has; and which wheel files that machine installs."""

import hashlib
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.bundle import build, wheels
from llm_pipeline.bundle.wheels import Target, download, extra_requirements, select
from llm_pipeline.errors import BundleError
from llm_pipeline.lockfile import Pin, read_lock

TARGET = Target(python="3.12", machine="x86_64")
REPO = Path(__file__).resolve().parents[2]


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


def _fake_pip(built_tag: str) -> Any:
    """pip as the index answers: no wheel of deepspeed (source only), a py3 wheel of the rest;
    `pip wheel` builds deepspeed's with `built_tag`."""

    def pip(command: list[str]) -> subprocess.CompletedProcess[str]:
        folder = Path(command[command.index("-d" if "download" in command else "-w") + 1])
        wanted = [arg for arg in command if "==" in arg]
        if "wheel" in command:
            name, version = wanted[0].split("==")
            (folder / f"{name}-{version}-{built_tag}.whl").touch()
            return subprocess.CompletedProcess(command, 0, "", "")
        if "deepspeed==0.19.8" in wanted:
            error = "ERROR: No matching distribution found for deepspeed==0.19.8"
            return subprocess.CompletedProcess(command, 1, "", error)
        for spec in wanted:
            name, version = spec.split("==")
            (folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").touch()
        return subprocess.CompletedProcess(command, 0, "", "")

    return pip


#: What the fake pip's empty wheel files hash to.
EMPTY = "sha256:" + hashlib.sha256(b"").hexdigest()
PINS = [Pin("deepspeed", "0.19.8", None, ("x",)), Pin("hjson", "3.1.0", None, (EMPTY,))]


def test_source_only_packages_are_built_and_the_rest_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wheels, "_pip", _fake_pip("py3-none-any"))
    found = download(PINS, TARGET, tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "built/deepspeed-0.19.8-py3-none-any.whl",
        "hjson-3.1.0-py3-none-any.whl",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["built", "hjson-3.1.0-py3-none-any.whl"]


def test_a_cached_wheel_cut_short_or_changed_is_fetched_again_and_a_wrong_download_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip writes a wheel in place: a build killed then left part of one in the cache, which
    every later build carried. Now a cached wheel is used only with the lock's hash, pip
    writes outside the cache, and what it downloads must have the lock's hash too."""
    calls: list[list[str]] = []
    fake = _fake_pip("py3-none-any")

    def pip(command: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return fake(command)

    monkeypatch.setattr(wheels, "_pip", pip)
    hjson = PINS[1]
    cut_short = tmp_path / "hjson-3.1.0-py3-none-any.whl"
    cut_short.write_bytes(b"PK\x03\x04 half a wheel")
    assert download([hjson], TARGET, tmp_path) == [cut_short]
    assert len(calls) == 1 and cut_short.read_bytes() == b""  # the whole (empty) one now
    assert download([hjson], TARGET, tmp_path) == [cut_short] and len(calls) == 1  # cached
    other = Pin("hjson", "3.1.0", None, ("sha256:" + "0" * 64,))
    with pytest.raises(BundleError, match=r"downloaded, has sha256:e3b0.*not the hash the bun"):
        download([other], TARGET, tmp_path)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_wheel_built_for_this_python_only_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wheels, "_pip", _fake_pip("cp311-cp311-linux_x86_64"))
    with pytest.raises(BundleError, match=r"no wheel of deepspeed==0.19.8 that Python 3.12 on"):
        download(PINS, TARGET, tmp_path)


def test_an_unreachable_index_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = (
        "WARNING: Retrying ... NewConnectionError('Failed to establish a new connection')\n"
        "ERROR: No matching distribution found for deepspeed==0.19.8"
    )
    monkeypatch.setattr(
        wheels, "_pip", lambda command: subprocess.CompletedProcess(command, 1, "", stderr)
    )
    with pytest.raises(BundleError, match=r"^pip cannot reach the package index: "):
        download(PINS, TARGET, tmp_path)


def test_requirements_are_read_only_from_the_locks_own_version() -> None:
    pins = read_lock(REPO / "requirements.lock")
    here = select(["tokenizers"], [], pins, TARGET)
    assert "huggingface-hub" in here.pins and not here.unexpanded  # installed as locked
    drifted = {**pins, "tokenizers": Pin("tokenizers", "0.0.1", None, ("x",))}
    assert select(["tokenizers"], [], drifted, TARGET).unexpanded == {"tokenizers"}


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A wheel file with just its METADATA."""
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    with zipfile.ZipFile(path, "w") as archive:
        info = f"{name.replace('-', '_')}-{version}.dist-info/METADATA"
        archive.writestr(info, "Metadata-Version: 2.1\n" + "\n".join(lines) + "\n")
    return path


LIGER_REQUIRES = [
    "torch>=2.1.2",
    "triton>=2.3.1",
    "transformers>=5.0.0; extra == 'dev'",
    "windows-only; sys_platform == 'win32'",
]


def _optional(folder: Path, requires: list[str], **extra: Any) -> list[Path]:
    """`wheels.optional` for liger-kernel, its wheel already in the cache `folder` (no pip)."""
    wheel = _wheel(folder, "liger-kernel", "0.8.5", requires)
    digest = "sha256:" + hashlib.sha256(wheel.read_bytes()).hexdigest()
    pin = Pin("liger-kernel", "0.8.5", None, extra.pop("hashes", (digest,)))
    return wheels.optional([pin], TARGET, folder, carried=["transformers"], **extra)


def test_an_optional_wheel_that_needs_only_torch_and_triton_is_carried(tmp_path: Path) -> None:
    found = _optional(tmp_path, LIGER_REQUIRES)
    assert [p.name for p in found] == ["liger_kernel-0.8.5-py3-none-any.whl"]
    # A requirement the bundle carries or leaves to the machine is met too.
    assert _optional(tmp_path, [*LIGER_REQUIRES, "transformers", "NumPy"], machine_has=["numpy"])


def test_an_optional_wheel_with_another_hash_or_an_unmet_requirement_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cached wheel has another hash, so it is downloaded again: the index serves the same.
    def pip(command: list[str]) -> subprocess.CompletedProcess[str]:
        _wheel(Path(command[command.index("-d") + 1]), "liger-kernel", "0.8.5", LIGER_REQUIRES)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(wheels, "_pip", pip)
    with pytest.raises(BundleError, match=r"not the hash the bundle pins for liger-kernel==0.8.5"):
        _optional(tmp_path, LIGER_REQUIRES, hashes=("sha256:0",))
    with pytest.raises(BundleError, match=r"requires einops>=0.7, which the bundle neither"):
        _optional(tmp_path, [*LIGER_REQUIRES, "einops>=0.7"])


def test_the_bundle_carries_liger_kernel_pinned_and_hashed() -> None:
    (pin,) = build.OPTIONAL_WHEELS
    assert (pin.name, pin.version) == ("liger-kernel", "0.8.5")
    assert pin.hashes[0].startswith("sha256:") and len(pin.hashes[0]) == 7 + 64
    assert "liger-kernel" not in read_lock(REPO / "requirements.lock")  # on purpose: README
    assert build.BuildOptions(checkout=REPO).optional == build.OPTIONAL_WHEELS


def test_what_a_killed_builds_pip_left_in_the_cache_goes_with_the_next_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build SIGKILLed while pip downloaded left its `.incoming-*` folder, half a wheel in
    it, in the cache for good; each such kill left another. A running build's folder stays."""
    import os
    import sys

    monkeypatch.setattr(wheels, "_pip", _fake_pip("py3-none-any"))
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    killed = tmp_path / f".incoming-{dead.pid}-abcd1234"
    killed.mkdir()
    (killed / "hjson-3.1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 half a wheel")
    running = tmp_path / f".incoming-{os.getpid()}-efgh5678"
    running.mkdir()
    download([PINS[1]], TARGET, tmp_path)
    assert not killed.exists()
    assert running.is_dir()
