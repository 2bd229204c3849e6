"""The few artifact operations every step shares."""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from llm_pipeline.output_files import RESOLVED_CONFIG_FILE

__all__ = ["RESOLVED_CONFIG_FILE", "MetricsSink", "log_metrics", "save_resolved_config"]


class MetricsSink(Protocol):
    """What a step needs of KFP's `Metrics` artifact."""

    def log_metric(self, metric: str, value: float) -> None: ...


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
        logged = json.loads(file.read_text()) if file.is_file() else {}
        file.write_text(json.dumps(logged | known, indent=2) + "\n")


def save_resolved_config(folder: str | Path, **sections: BaseModel | str) -> None:
    """Record the typed settings an output folder was made with."""
    payload: dict[str, Any] = {
        name: section.model_dump(mode="json") if isinstance(section, BaseModel) else section
        for name, section in sections.items()
    }
    (Path(folder) / RESOLVED_CONFIG_FILE).write_text(json.dumps(payload, indent=2) + "\n")
