"""A step's metrics file, which KFP's local cache needs beside the artifact's metadata."""

import json
from pathlib import Path

from llm_pipeline.steps.artifacts import log_metrics


class Sink:
    """A Metrics artifact as KFP hands one to a step: values logged, and a path."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.metadata: dict[str, float] = {}

    def log_metric(self, name: str, value: float) -> None:
        self.metadata[name] = value


def test_metrics_logged_twice_add_up_and_none_is_left_out(tmp_path: Path) -> None:
    sink = Sink(tmp_path / "metrics")
    log_metrics(sink, {"loss": 1.5, "skipped_steps": None})
    log_metrics(sink, {"rougeLsum": 15})

    assert sink.metadata == {"loss": 1.5, "rougeLsum": 15.0}
    assert json.loads((tmp_path / "metrics").read_text()) == {"loss": 1.5, "rougeLsum": 15.0}


def test_a_file_a_killed_attempt_cut_short_does_not_fail_the_retry(tmp_path: Path) -> None:
    """The retry logs every value again: what the killed attempt left is not read back."""
    (tmp_path / "metrics").write_text('{"loss": 1.')
    sink = Sink(tmp_path / "metrics")

    log_metrics(sink, {"loss": 1.25})

    assert json.loads((tmp_path / "metrics").read_text()) == {"loss": 1.25}
