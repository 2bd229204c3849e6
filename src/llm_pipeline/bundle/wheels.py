"""The wheels a GPU machine without internet needs beside its own torch, at the lock's versions.

Which: the dependency closure of the project's own wheel (its Requires-Dist, with the extras
asked for), with each requirement's environment marker evaluated for the GPU machine's
Python and platform, not this one's. The closure stops at torch and the packages only its
CUDA build brings (`lockfile.is_platform_package`): the machine's own build must stay, and
its CUDA libraries alone are gigabytes. It also stops at the packages named as already on the
machine (`machine_has`), which the installer there checks before it trusts them.
Transitive requirements are read from this environment's installed metadata, which
`make install` made from the same lock; a package that is not installed here at the lock's
version (one the lock holds only for another platform or Python, or an environment that has
drifted from the lock) is carried without its own requirements, and `Selection.unexpanded`
says so (the build prints it; the check on the machine finds what that leaves missing).

How: one `pip download --no-deps --only-binary=:all:` for the target's Python and platform
tags into a cache folder (what is already there is not fetched again, so a second build
needs no network), repeated without each package pip finds no wheel for. Those are
source-only on PyPI (DeepSpeed, kfp-server-api, rouge-score at the lock's versions): `pip
wheel --no-deps` builds them here, and a built wheel that would not install there (a compiled
one for this Python) is refused. A downloaded wheel is checked against the lock's hashes when
it arrives and whenever the cache is read, and enters the cache by rename, whole (`download`).

Optional wheels (`optional`): packages outside the lock that an opt-in setting needs on the
GPU machine (liger-kernel for `train.kernels: "liger"`), each pinned with its wheel's hash.
They come the same way, and are refused unless the file has that hash and every requirement
it has there is the machine's own (torch, Triton) or carried.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import psutil
from packaging.requirements import Requirement
from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename

from llm_pipeline.errors import BundleError
from llm_pipeline.launch.lifetime import dies_with_this_process
from llm_pipeline.lockfile import Pin, is_platform_package

#: manylinux tags pip accepts for the target, newest first (`--platform` may repeat).
MANYLINUX = ("manylinux_2_34", "manylinux_2_28", "manylinux_2_17", "manylinux2014")
#: How long one pip call may take (a whole download of ~60 wheels takes well under this).
PIP_TIMEOUT_S = 900
#: What pip prints when it cannot reach the index (it then finds no wheel of anything).
_UNREACHABLE = ("NewConnectionError", "Could not fetch URL", "ConnectTimeoutError", "ProxyError")
_NO_WHEEL = re.compile(r"No matching distribution found for ([A-Za-z0-9_.\-]+)==")
#: The wheel cache's folder for the wheels built here from source (no hash of theirs to check).
BUILT = "built"
#: Start of the name of the folder a build's pip writes into, in the cache; its pid follows.
INCOMING = ".incoming-"


@dataclass(frozen=True)
class Target:
    """The GPU machine's interpreter: CPython `python` (major.minor) on Linux `machine`."""

    python: str = "3.12"
    machine: str = "x86_64"

    @property
    def marker_environment(self) -> dict[str, str]:
        """PEP 508 marker variables as that interpreter would report them."""
        return {
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "implementation_name": "cpython",
            "implementation_version": f"{self.python}.0",
            "platform_python_implementation": "CPython",
            "os_name": "posix",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": self.machine,
            "platform_release": "",
            "platform_version": "",
        }

    @property
    def platforms(self) -> list[str]:
        return [f"{tag}_{self.machine}" for tag in MANYLINUX]

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    def accepts(self, wheel: str) -> bool:
        """Whether pip on the target would install the wheel file named `wheel`."""
        _, _, _, tags = parse_wheel_filename(wheel)
        return any(self._accepts(tag) for tag in tags)

    def _accepts(self, tag: Tag) -> bool:
        python_ok = tag.interpreter in ("py3", self.abi, "py" + self.abi[2:]) or (
            tag.abi == "abi3" and tag.interpreter.startswith("cp3")
        )
        abi_ok = tag.abi in ("none", "abi3", self.abi)
        platform_ok = tag.platform == "any" or (
            tag.platform.endswith(self.machine)
            and tag.platform.startswith(("manylinux", "linux"))
            and tag.platform
            in {*self.platforms, f"linux_{self.machine}"}
            | _older_manylinux(tag.platform, self.machine)
        )
        return python_ok and abi_ok and platform_ok


def _older_manylinux(platform: str, machine: str) -> set[str]:
    """`platform` itself when it is a manylinux tag no newer than glibc 2.34 (what the
    newest tag in MANYLINUX covers)."""
    found = re.fullmatch(rf"manylinux_2_(\d+)_{machine}", platform)
    return {platform} if found and int(found.group(1)) <= 34 else set()


@dataclass
class Selection:
    """The packages to carry, at the lock's versions, and what the closure left out."""

    pins: dict[str, Pin] = field(default_factory=dict)
    #: Left out as the machine's own: torch's platform packages and `machine_has`.
    machine_own: set[str] = field(default_factory=set)
    #: Carried, but their own requirements could not be read here (not installed at the
    #: lock's version).
    unexpanded: set[str] = field(default_factory=set)


def project_requirements(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a built wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(name).decode("utf-8"))
    return message.get_all("Requires-Dist") or []


def extra_requirements(lines: Iterable[str], extra: str, leave_out: Iterable[str]) -> list[str]:
    """The requirements `extra` adds (its marker dropped), less the packages in `leave_out`."""
    skip = {canonicalize_name(name) for name in leave_out}
    found = []
    for line in lines:
        requirement = Requirement(line)
        marker = requirement.marker
        if (
            marker is None
            or not marker.evaluate({"extra": extra})
            or marker.evaluate({"extra": ""})
        ):
            continue
        if canonicalize_name(requirement.name) in skip:
            continue
        requirement.marker = None
        found.append(str(requirement))
    return found


def select(
    root_requirements: Sequence[str],
    extras: Iterable[str],
    pins: Mapping[str, Pin],
    target: Target,
    *,
    machine_has: Iterable[str] = (),
    requires: Mapping[str, Sequence[str]] | None = None,
) -> Selection:
    """The closure of `root_requirements` (with `extras`) for `target`, pinned by the lock.

    `requires` maps a package to its Requires-Dist (default: this environment's installed
    metadata). Raises BundleError for a needed package the lock does not hold.
    """
    environment = target.marker_environment
    skip = {canonicalize_name(name) for name in machine_has}
    selection = Selection()
    missing: list[str] = []
    todo: list[tuple[str, frozenset[str]]] = [
        (line, frozenset(extras)) for line in root_requirements
    ]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        line, wanted = todo.pop()
        requirement = Requirement(line)
        if requirement.marker is not None and not any(
            requirement.marker.evaluate({**environment, "extra": extra}) for extra in (*wanted, "")
        ):
            continue
        name = canonicalize_name(requirement.name)
        if is_platform_package(name) or name in skip:
            selection.machine_own.add(name)
            continue
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        if name not in pins:
            missing.append(str(requirement))
            continue
        selection.pins[name] = pins[name]
        dependencies = _requires(pins[name], requires)
        if dependencies is None:
            selection.unexpanded.add(name)
            continue
        todo += [(dependency, frozenset(requirement.extras)) for dependency in dependencies]
    if missing:
        raise BundleError(
            f"requirements.lock lacks {', '.join(sorted(set(missing)))}, which the project "
            "needs: run `make lock`"
        )
    return selection


def _requires(pin: Pin, requires: Mapping[str, Sequence[str]] | None) -> Sequence[str] | None:
    """The pin's Requires-Dist, None when this environment does not have it at that version
    (another version's requirements may differ)."""
    if requires is not None:
        return requires.get(pin.name)
    try:
        if metadata.version(pin.name) != pin.version:
            return None
        return metadata.requires(pin.name) or []
    except metadata.PackageNotFoundError:
        return None


def download(pins: Iterable[Pin], target: Target, cache: Path) -> list[Path]:
    """The wheel file of every pin, from the cache folder or PyPI, built here for packages
    PyPI has no wheel of. Raises BundleError when pip fails for another reason (the index
    unreachable, most often), or when a downloaded wheel's hash is not one the pin has.

    A downloaded wheel is taken from the cache only while its hash is one the pin has
    (`requirements.lock`'s): a wheel cut short by a killed build, or changed since, is
    fetched again. pip writes its files in place, so it writes into a folder of this call's
    own and each wheel is renamed into the cache whole. Wheels built here from source have
    no hash to check: they go in the cache's `BUILT` folder. A build killed with SIGKILL
    leaves its folder (what pip had written): the next download removes it, its pid gone.
    """
    cache.mkdir(parents=True, exist_ok=True)
    remove_abandoned(cache, INCOMING)
    wanted: dict[str, Pin] = {pin.name: pin for pin in pins}
    have = _cached(cache, target, wanted)
    todo = sorted(set(wanted) - set(have))
    if todo:
        with tempfile.TemporaryDirectory(prefix=f"{INCOMING}{os.getpid()}-", dir=cache) as incoming:
            _fetch(todo, wanted, target, cache, Path(incoming))
        have.update(_cached(cache, target, wanted))
    for name, pin in wanted.items():
        path = have.get(name)
        if path is None:
            raise BundleError(
                f"no wheel of {name}=={pin.version} that Python {target.python} on "
                f"{target.machine} Linux installs, after the download and build"
            )
    return sorted(have[name] for name in wanted)


def remove_abandoned(folder: Path, prefix: str) -> None:
    """Delete the folders in `folder` that `tempfile` made with the prefix `<prefix><pid>-`
    and whose process is gone: what a build killed with SIGKILL left (a running build's
    folder stays)."""
    named = re.compile(rf"{re.escape(prefix)}(\d+)-[a-z0-9_]{{8}}")
    for found in folder.glob(f"{glob.escape(prefix)}*"):
        match = named.fullmatch(found.name)
        if match and found.is_dir() and not psutil.pid_exists(int(match[1])):
            shutil.rmtree(found, ignore_errors=True)


def _fetch(
    todo: list[str], wanted: Mapping[str, Pin], target: Target, cache: Path, incoming: Path
) -> None:
    """Download `todo` (build those with no wheel on the index) into `incoming`, then move
    each wheel into `cache`, a downloaded one only if its hash is one its pin has."""
    todo = list(todo)
    source_only: list[str] = []
    while todo:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        command += ["--python-version", target.python, "--implementation", "cp"]
        command += ["--abi", target.abi, "--abi", "abi3", "--abi", "none"]
        for platform in target.platforms:
            command += ["--platform", platform]
        command += ["-d", str(incoming), *(f"{n}=={wanted[n].version}" for n in todo)]
        done = _pip(command)
        if done.returncode == 0:
            break
        if any(sign in done.stderr for sign in _UNREACHABLE):
            raise BundleError(f"pip cannot reach the package index: {_tail(done.stderr)}")
        found = _NO_WHEEL.search(done.stderr)
        name = str(canonicalize_name(found.group(1))) if found else ""
        if name not in todo:
            raise BundleError(f"pip download failed: {_tail(done.stderr)}")
        source_only.append(name)
        todo.remove(name)
    for path in sorted(incoming.glob("*.whl")):
        pin = wanted.get(canonicalize_name(parse_wheel_filename(path.name)[0]))
        digest = _digest(path)
        if pin is not None and digest not in pin.hashes:
            raise BundleError(
                f"{path.name}, downloaded, has {digest}, not the hash the bundle pins for "
                f"{pin.name}=={pin.version} (requirements.lock's): the index served another "
                "file than the one locked; refused"
            )
        os.replace(path, cache / path.name)
    built = incoming / BUILT
    built.mkdir()
    for name in source_only:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        command += ["-w", str(built), f"{name}=={wanted[name].version}"]
        done = _pip(command)
        if done.returncode != 0:
            raise BundleError(f"building {name}'s wheel from source failed: {_tail(done.stderr)}")
    if source_only:
        (cache / BUILT).mkdir(exist_ok=True)
        for path in sorted(built.glob("*.whl")):
            os.replace(path, cache / BUILT / path.name)


def _cached(cache: Path, target: Target, wanted: Mapping[str, Pin]) -> dict[str, Path]:
    """Wheels in `cache` at a wanted pin's version that the target accepts, by name: one
    downloaded only while its hash is one the pin has, else one built here (`BUILT`)."""
    found: dict[str, Path] = {}
    for path in [*sorted(cache.glob("*.whl")), *sorted((cache / BUILT).glob("*.whl"))]:
        name, version, _, _ = parse_wheel_filename(path.name)
        pin = wanted.get(canonicalize_name(name))
        if pin is None or pin.name in found:
            continue
        if version.public != pin.version or not target.accepts(path.name):
            continue
        if path.parent == cache and _digest(path) not in pin.hashes:
            continue  # cut short or changed: fetched again
        found[pin.name] = path
    return found


def _digest(path: Path) -> str:
    with path.open("rb") as stream:
        return "sha256:" + hashlib.file_digest(stream, "sha256").hexdigest()


def _pip(command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
            check=False,
            preexec_fn=dies_with_this_process(),  # a build killed with SIGKILL stops pip too
        )
    except subprocess.TimeoutExpired as exc:
        raise BundleError(f"pip took over {PIP_TIMEOUT_S} s: {' '.join(command[:5])} ...") from exc


def _tail(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return " / ".join(lines[-3:]) or "(no message)"


def optional(
    pins: Sequence[Pin],
    target: Target,
    cache: Path,
    *,
    carried: Iterable[str],
    machine_has: Iterable[str] = (),
) -> list[Path]:
    """The wheel file of each optional pin (`download`), checked: its sha256 is one of the
    pin's hashes, and each of its requirements for `target` (no extras) is torch's or its
    CUDA build's (`is_platform_package`), in `machine_has`, or among `carried` (canonical
    names). Raises BundleError naming the first problem of each kind found."""
    found = download(pins, target, cache)
    have = {canonicalize_name(name) for name in (*carried, *machine_has)}
    environment = {**target.marker_environment, "extra": ""}
    for path in found:
        name = canonicalize_name(parse_wheel_filename(path.name)[0])
        pin = next(p for p in pins if canonicalize_name(p.name) == name)
        digest = _digest(path)
        if digest not in pin.hashes:
            raise BundleError(
                f"{path.name} has {digest}, not the hash the bundle pins for {pin.name}=="
                f"{pin.version}: delete it from {cache} and build again"
            )
        unmet = []
        for line in project_requirements(path):
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            needed = canonicalize_name(requirement.name)
            if not is_platform_package(needed) and needed not in have:
                unmet.append(str(requirement))
        if unmet:
            raise BundleError(
                f"the optional {pin.name}=={pin.version} requires {', '.join(unmet)}, which "
                "the bundle neither carries nor leaves to the machine"
            )
    return found
