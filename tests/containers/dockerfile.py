"""Read a Dockerfile's instructions, so tests run the very commands an image runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERS = REPO / "containers"


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


def image_command(dockerfile: str) -> list[str]:
    """The image's ENTRYPOINT, with this interpreter standing in for the image's `python`."""
    entrypoint = exec_form(CONTAINERS / dockerfile, "ENTRYPOINT")
    assert entrypoint[:2] == ["python", "-m"], entrypoint
    return [sys.executable, *entrypoint[1:]]
