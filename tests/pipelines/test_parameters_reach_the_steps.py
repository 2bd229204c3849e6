"""A run's parameters reach the steps: the whole pipeline under KFP's local runner, on
docstring text built here (nothing outside the repository), with three parameters set as a
person sets them in the Vertex "Create run" form. finetune trains with the batch size and
learning rate given, and the gate follows the override given, not the config's."""

import json
from pathlib import Path

import pytest

from llm_pipeline.config import load_config
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.runner import run_local

from ..containers.job import docstring_rows, job_config


@pytest.mark.slow
def test_parameters_set_for_a_run_reach_finetune_and_the_gate(tmp_path: Path) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text(docstring_rows(48))
    raw = job_config(str(data))
    raw["name"] = "parameters-run"
    raw["evaluate"] = {"max_samples": 4, "max_new_tokens": 8, "bootstrap_samples": 10}
    raw["deploy"] = {"registry_dir": str(tmp_path / "registry")}
    config = load_config(raw=raw).config
    assert config.train.per_device_batch_size == 4 and config.deploy_policy.override == "auto"

    run = run_local(
        build_pipeline(config),
        pipeline_root=tmp_path / "runs",
        arguments={"per_device_batch_size": 2, "learning_rate": 0.001, "deploy_override": "never"},
    )

    assert run.succeeded, [(s.name, s.status, s.error) for s in run.steps]
    steps = {step.name: step for step in run.steps}
    trained = json.loads(
        (Path(steps["finetune"].outputs["trained_model"]) / "llm_pipeline_config.json").read_text()
    )
    assert trained["train"]["per_device_batch_size"] == 2
    assert trained["train"]["learning_rate"] == 0.001
    assert steps["should-deploy"].outputs["Output"] == "False"
    assert "deploy_policy.override is 'never'" in steps["should-deploy"].outputs["reason"]
    assert steps["deploy"].status == "not run"
    resolved = json.loads(Path(steps["configure"].outputs["resolved"]).read_text())
    assert resolved["deploy_policy"]["override"] == "never"
