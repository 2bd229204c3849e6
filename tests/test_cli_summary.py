"""The run summary stays readable: JSON and long output values (configure's sections) are
named, not printed."""

from pathlib import Path

import pytest

from llm_pipeline.cli import print_summary
from llm_pipeline.runner.local import LocalRun, StepOutcome


def test_long_values_are_named_not_printed(capsys: pytest.CaptureFixture[str]) -> None:
    section = '{"dataset": "' + "x" * 400 + '"}'
    configure = StepOutcome(
        "configure",
        "succeeded",
        outputs={
            "resolved": "/runs/r/configure/resolved",
            "data": section,
            "model": '\'{"source": "t5-small"}\'',
            "worker_pool_specs": "[]",
        },
    )
    print_summary(LocalRun(run_dir=Path("/runs/r"), succeeded=True, steps=(configure,)))
    out = capsys.readouterr().out
    assert "resolved: /runs/r/configure/resolved" in out
    assert "(data, model, worker_pool_specs: in the step's folder)" in out
    assert "x" * 100 not in out
