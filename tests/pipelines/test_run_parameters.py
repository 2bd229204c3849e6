"""The pipeline's parameters: what a person changes in the Vertex "Create run" form is
applied to the config and validated again by the first step, which fails at once, naming
the parameter, on a bad value."""

from pathlib import Path

import pytest

from llm_pipeline.config import ConfigError, load_config
from llm_pipeline.config.run_parameters import apply_run_parameters, parameter_defaults
from llm_pipeline.local import run_local
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.steps.configure import with_runtime_location

REPO = Path(__file__).resolve().parents[2]


def test_parameters_override_the_config() -> None:
    config = load_config(REPO / "configs" / "small1vm1gpu.json").config
    values = {
        **parameter_defaults(config),
        "epochs": 0.5,
        "dataset": "gs://acme-data/cnndm",
        "deploy_override": "never",
        "min_improvement": 0.25,
    }
    applied = apply_run_parameters(config.model_dump_json(), values)
    assert applied.train.epochs == 0.5
    assert applied.data.dataset == "gs://acme-data/cnndm"
    assert applied.deploy_policy.override == "never"
    assert applied.deploy_policy.min_improvement == 0.25
    assert applied.train.learning_rate == config.train.learning_rate  # the default: unchanged


def test_an_empty_model_source_keeps_a_model_built_from_parts() -> None:
    config = load_config(REPO / "configs" / "small1vm1gpu.json", ["vertex.project=acme"]).config
    encoder_decoder = config.model_copy(
        update={
            "model": config.model.model_validate(
                {
                    "encoder_decoder": {
                        "encoder": "bert-base-uncased",
                        "decoder": "bert-base-uncased",
                    }
                }
            )
        }
    )
    defaults = parameter_defaults(encoder_decoder)
    assert defaults["model_source"] == ""
    applied = apply_run_parameters(encoder_decoder.model_dump_json(), defaults)
    assert applied.model == encoder_decoder.model


def test_bad_values_name_the_parameter_and_the_config_key() -> None:
    config = load_config(REPO / "configs" / "small1vm1gpu.json").config
    values = {
        **parameter_defaults(config),
        "epochs": -1.0,
        "deploy_override": "sometimes",
        "per_device_batch_size": 0,
    }
    with pytest.raises(ConfigError) as caught:
        apply_run_parameters(config.model_dump_json(), values)
    problems = "\n".join(caught.value.problems)
    assert "train.epochs (parameter epochs): must be > 0" in problems
    assert "deploy_policy.override (parameter deploy_override): must be one of" in problems
    assert "train.per_device_batch_size (parameter per_device_batch_size)" in problems
    with pytest.raises(ConfigError, match=r"learning_rate.*not a number"):
        apply_run_parameters(config.model_dump_json(), {"learning_rate": float("nan")})
    with pytest.raises(ConfigError, match="unknown pipeline parameter"):
        apply_run_parameters(config.model_dump_json(), {"zone": "us-central1-a"})
    # The cluster's shape is compiled into the worker pools: a run cannot change it.
    with pytest.raises(ConfigError, match="unknown pipeline parameter"):
        apply_run_parameters(config.model_dump_json(), {"node_count": 4})


def test_a_spec_without_a_project_deploys_in_the_runs_own_project() -> None:
    config = load_config(REPO / "configs" / "small1vm1gpu.json").config
    assert config.vertex.project is None
    located = with_runtime_location(config, {"project": "acme", "region": "europe-west4"})
    assert (located.vertex.project, located.vertex.region) == ("acme", "europe-west4")
    # Outside Vertex the placeholders stay unresolved: nothing changes.
    unresolved = {"project": "{{$.pipeline_google_cloud_project_id}}", "region": "{{$.x}}"}
    assert with_runtime_location(config, unresolved) == config
    named = config.model_copy(update={"vertex": config.vertex.model_copy(update={"project": "p"})})
    assert with_runtime_location(named, {"project": "acme"}).vertex.project == "p"


def test_a_bad_parameter_fails_the_first_step_and_nothing_else_runs(tmp_path: Path) -> None:
    config = load_config(REPO / "configs" / "small1vm1gpu.json").config
    run = run_local(
        build_pipeline(config, target="local"),
        pipeline_root=tmp_path,
        arguments={"epochs": -1.0, "gate_metric": "rougeLsum"},
    )
    assert not run.succeeded
    status = {step.name: step.status for step in run.steps}
    assert status["configure"] == "failed"
    assert {status[name] for name in status if name != "configure"} == {"not run"}
    configure = next(step for step in run.steps if step.name == "configure")
    assert configure.error is not None
    assert "train.epochs (parameter epochs): must be > 0.0, got -1.0" in configure.error
