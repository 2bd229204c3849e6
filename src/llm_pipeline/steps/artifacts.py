"""What every step shares: reading its component's arguments, and the few artifact
operations."""

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from llm_pipeline.output_files import RESOLVED_CONFIG_FILE
from llm_pipeline.storage import to_uri

__all__ = [
    "RESOLVED_CONFIG_FILE",
    "Arguments",
    "ArtifactFiles",
    "MetricsSink",
    "log_metrics",
    "save_resolved_config",
    "write_text_output",
]


class MetricsSink(Protocol):
    """What a step needs of KFP's `Metrics` artifact."""

    def log_metric(self, metric: str, value: float) -> None: ...


class ArtifactFiles(Protocol):
    """What a step needs of a KFP artifact: where its files are (locally; on Vertex through
    the `/gcs/` mount), its `uri`, and its metadata."""

    path: str
    uri: str
    metadata: dict[str, Any]


class Arguments:
    """A component's arguments, as its body passes them on: `run_x(dict(locals()))`.

    The component's typed signature is their one definition (`steps/__init__.py` says why);
    a step reads each where it uses it, by a method that names its kind, so that mypy knows
    the type and a wrong or missing argument fails at once, by name.
    """

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def _get(self, name: str) -> Any:
        if name not in self._values:
            raise TypeError(f"the step reads argument {name!r}, which its component lacks")
        return self._values[name]

    def text(self, name: str) -> str:
        """A string parameter, or the path an `OutputPath(str)` output is written to."""
        value = self._get(name)
        if not isinstance(value, str):
            raise TypeError(f"argument {name!r} is a {type(value).__name__}, not a str")
        return value

    def artifact(self, name: str) -> ArtifactFiles:
        """An `Input[...]` or `Output[...]` artifact."""
        value = self._get(name)
        if not isinstance(getattr(value, "path", None), str):
            raise TypeError(f"argument {name!r} is a {type(value).__name__}, not an artifact")
        return value

    def metrics(self, name: str) -> MetricsSink:
        """An `Output[Metrics]` the step logs to (`log_metrics`)."""
        value = self._get(name)
        if not callable(getattr(value, "log_metric", None)):
            raise TypeError(f"argument {name!r} is a {type(value).__name__}, not Metrics")
        return value

    def subset(self, names: Iterable[str]) -> dict[str, Any]:
        """The arguments called `names`, as given: a table's entries (the run parameters)."""
        return {name: self._get(name) for name in names}

    def folder(self) -> Path | None:
        """The step's own folder: that of its last artifact argument. Components take their
        inputs first and their outputs last, and an input's folder belongs to the step that
        made it."""
        for value in reversed(self._values.values()):
            path = getattr(value, "path", None)
            if isinstance(path, str) and path:
                return Path(path).parent
        return None


def log_metrics(sink: MetricsSink, values: Mapping[str, float | int | None]) -> None:
    """Log every known value; None means "not measured here" and is left out.

    The values are also written as JSON to the artifact's own file: KFP keeps a Metrics
    artifact's values in metadata only, and its local cache takes an artifact without a file
    for one that was deleted, so a step that logs metrics would never be reused.
    """
    known = {name: float(value) for name, value in values.items() if value is not None}
    for name, value in known.items():
        sink.log_metric(name, value)
    path = getattr(sink, "path", None)
    if isinstance(path, str) and path:
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(_logged(file) | known, indent=2) + "\n")


def _logged(file: Path) -> dict[str, Any]:
    """What this attempt logged to `file` before; nothing where there is none, or where a
    killed attempt left it cut short (a retry logs every value again)."""
    try:
        logged = json.loads(file.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return logged if isinstance(logged, dict) else {}


def save_resolved_config(folder: str | Path, **sections: BaseModel | str) -> None:
    """Record the typed settings an output folder was made with."""
    payload: dict[str, Any] = {
        name: section.model_dump(mode="json") if isinstance(section, BaseModel) else section
        for name, section in sections.items()
    }
    (Path(folder) / RESOLVED_CONFIG_FILE).write_text(json.dumps(payload, indent=2) + "\n")


def write_text_output(path: str, text: str) -> None:
    """Write a step's text output (an `OutputPath(str)` or a Markdown artifact's file)."""
    target = Path(to_uri(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
