"""The few artifact operations every step shares."""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

#: Written into every output folder: the settings it was made with (STYLE #6).
RESOLVED_CONFIG_FILE = "llm_pipeline_config.json"


class MetricsSink(Protocol):
    """What a step needs of KFP's `Metrics` artifact."""

    def log_metric(self, metric: str, value: float) -> None: ...


def log_metrics(sink: MetricsSink, values: Mapping[str, float | int | None]) -> None:
    """Log every known value; None means "not measured here" and is left out."""
    for name, value in values.items():
        if value is not None:
            sink.log_metric(name, float(value))


def save_resolved_config(folder: str | Path, **sections: BaseModel | str) -> None:
    """Record the typed settings an output folder was made with."""
    payload: dict[str, Any] = {
        name: section.model_dump(mode="json") if isinstance(section, BaseModel) else section
        for name, section in sections.items()
    }
    (Path(folder) / RESOLVED_CONFIG_FILE).write_text(json.dumps(payload, indent=2) + "\n")
