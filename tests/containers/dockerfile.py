"""Read a Dockerfile's instructions, so tests run the very commands an image runs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERS = REPO / "containers"
#: The interpreter every image runs: its virtual environment's (bin/ first on PATH).
VENV_PYTHON = "/opt/venv/bin/python"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        keyword, _, rest = pending.partition(" ")
        found.append((keyword.upper(), rest.strip()))
        pending = ""
    return found


def exec_form(path: Path, keyword: str) -> list[str]:
    """The JSON array of the last `keyword` (ENTRYPOINT, CMD); [] when there is none.

    The exec form is what Docker runs without a shell; a shell-form value fails here.
    """
    values = [rest for name, rest in instructions(path) if name == keyword]
    if not values:
        return []
    command = json.loads(values[-1])
    assert isinstance(command, list) and all(isinstance(a, str) for a in command), command
    return command


def healthcheck_command(path: Path) -> list[str]:
    """The exec-form command of the HEALTHCHECK (its options before CMD dropped)."""
    (value,) = [rest for name, rest in instructions(path) if name == "HEALTHCHECK"]
    _, _, command = value.partition("CMD ")
    return list(json.loads(command))


def run_args(path: Path) -> list[str]:
    """The argument of each RUN, in order."""
    return [rest for name, rest in instructions(path) if name == "RUN"]


def env_values(path: Path) -> dict[str, str]:
    """ENV's `KEY=VALUE` pairs, the last value of each key winning, as Docker sets them."""
    found: dict[str, str] = {}
    for name, rest in instructions(path):
        if name == "ENV":
            for pair in re.findall(r"(\w+)=(\"[^\"]*\"|\S+)", rest):
                found[pair[0]] = pair[1].strip('"')
    return found


def as_here(command: list[str]) -> list[str]:
    """An image's exec-form command with this interpreter standing in for the image's."""
    assert command[0] == VENV_PYTHON, command
    return [sys.executable, *command[1:]]


def image_command(dockerfile: str) -> list[str]:
    """The image's ENTRYPOINT, with this interpreter standing in for the image's."""
    entrypoint = exec_form(CONTAINERS / dockerfile, "ENTRYPOINT")
    assert entrypoint[1] == "-m", entrypoint
    return as_here(entrypoint)
