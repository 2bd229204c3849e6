"""The dependency lock, requirements.lock: what it pins, and whether an environment matches.

`make lock` writes it with uv (`uv pip compile --universal --generate-hashes`) from setup.py's
ranges and every extra. `make install` (and so CI) and the images install it whole with
`pip install --require-hashes --no-deps`, so a clone, CI and the images run the same
versions, each file checked against its hash. torch is not in it, nor what only its CUDA
build needs (`PLATFORM_PACKAGES`): each platform brings its own build at `TORCH_VERSION`,
the CPU build on laptops and CI, the CUDA build in the GPU images' base.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: The torch every platform installs beside the lock (the Makefile and Dockerfiles pin it).
TORCH_VERSION = "2.13.0"


def is_platform_package(name: str) -> bool:
    """torch, or a package only torch's CUDA build brings: triton, CUDA's libraries as wheels
    (nvidia-*, cuda-*). nvidia-ml-py is not one: NVML's Python bindings, which the lock holds."""
    canonical = canonicalize_name(name)
    if canonical in ("torch", "triton"):
        return True
    return canonical.startswith(("nvidia-", "cuda-")) and canonical != "nvidia-ml-py"


@dataclass(frozen=True)
class Pin:
    """One locked package: its exact version, where it applies, and its files' hashes."""

    name: str
    version: str
    marker: Marker | None
    hashes: tuple[str, ...]

    def applies(self, environment: Mapping[str, str] | None = None) -> bool:
        """Whether this platform installs it (`; sys_platform == 'win32'` and the like)."""
        return self.marker is None or self.marker.evaluate(dict(environment or {}))


def _logical_lines(text: str) -> Iterable[str]:
    """Requirement lines with their backslash continuations joined, comments dropped."""
    pending = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        pending = f"{pending} {line.strip()}" if pending else line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        yield pending
        pending = ""
    if pending:
        yield pending


def parse_lock(text: str) -> dict[str, Pin]:
    """The pins of a hashed requirements file, by canonical name.

    Raises ValueError for an entry that is not `name==version` with at least one hash:
    pip would refuse to install such a file with --require-hashes.
    """
    pins: dict[str, Pin] = {}
    for line in _logical_lines(text):
        spec, *options = re.split(r"\s+(?=--)", line)
        hashes = tuple(o.split("=", 1)[1] for o in options if o.startswith("--hash="))
        requirement = Requirement(spec)
        versions = [s.version for s in requirement.specifier if s.operator == "=="]
        if len(versions) != 1 or len(requirement.specifier) != 1 or not hashes:
            raise ValueError(f"lock entry {line[:80]!r} is not `name==version --hash=...`")
        name = canonicalize_name(requirement.name)
        pins[name] = Pin(name, versions[0], requirement.marker, hashes)
    return pins


def read_lock(path: str | Path) -> dict[str, Pin]:
    """`parse_lock` of the file at `path`."""
    return parse_lock(Path(path).read_text(encoding="utf-8"))


def installed_versions(paths: Sequence[str] | None = None) -> dict[str, str]:
    """Version of each distribution this interpreter sees (or found in `paths`), by canonical
    name; the first on sys.path wins, as for imports: a venv's own over its base's.

    Folders of vendored copies are not installs: importing setuptools puts its `_vendor`
    folder on sys.path, whose dist-infos (zipp, jaraco.*, wheel) would otherwise read as
    installed packages once anything in the process has imported it."""
    found: dict[str, str] = {}
    searched = [path for path in sys.path if Path(path).name != "_vendor"]
    found_in = metadata.distributions(path=searched if paths is None else list(paths))
    for dist in found_in:
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def lock_mismatches(
    pins: Mapping[str, Pin],
    installed: Mapping[str, str],
    *,
    installed_here: Mapping[str, str] | None = None,
    allowed_extra: Iterable[str] = (),
    environment: Mapping[str, str] | None = None,
) -> list[str]:
    """What keeps `installed` from being exactly the lock here: a pin missing or at another
    version, or a package in `installed_here` (default: all of `installed`; in an image, the
    venv's own, not its base's) that the lock does not hold, besides torch's platform
    packages and `allowed_extra`, such as pip and this package itself."""
    problems = []
    for name, pin in sorted(pins.items()):
        if not pin.applies(environment):
            continue
        have = installed.get(name)
        if have is None:
            problems.append(f"{name}: locked at {pin.version}, not installed")
        elif have != pin.version:
            problems.append(f"{name}: locked at {pin.version}, installed {have}")
    extra = {canonicalize_name(n) for n in allowed_extra}
    own = installed if installed_here is None else installed_here
    for name in sorted(set(own) - set(pins) - extra):
        if not is_platform_package(name):
            problems.append(f"{name}: installed ({own[name]}) but not in the lock")
    return problems


def unsatisfied_requirements(
    root: str, extras: Iterable[str], installed: Mapping[str, str]
) -> list[str]:
    """Requirements in the dependency closure of `root[extras]` that the installed versions
    do not meet: the check `pip check` makes, limited to what `root` needs, so that a base
    image's own packages do not count."""
    problems: list[str] = []
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(canonicalize_name(root), frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        key = f"{name}[{','.join(sorted(wanted))}]"
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": extra}) for extra in (*wanted, "")
            ):
                continue
            dependency = canonicalize_name(requirement.name)
            version = installed.get(dependency)
            if version is None:
                problems.append(f"{name} requires {requirement}: not installed")
            elif not requirement.specifier.contains(version, prereleases=True):
                problems.append(f"{name} requires {requirement}: {version} is installed")
            else:
                todo.append((dependency, frozenset(requirement.extras)))
    return sorted(set(problems))
