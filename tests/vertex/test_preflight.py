"""`pipeline.py --preflight`: the same pipeline, images and cluster shape at tiny sizes,
submitted with the real CLI and `aiplatform` SDK to the REST stand-in. The tiny values must
reach the job: the submitted parameters, the spec, and the config the steps get from the
configure step's own body. Its last step empties the preflight endpoint, and only that one.
"""

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llm_pipeline import cli
from llm_pipeline.config import ConfigError, PipelineConfig, load_config
from llm_pipeline.config.preflight import preflight_config
from llm_pipeline.config.run_parameters import parameter_defaults
from llm_pipeline.registry.vertex.registry import VertexRegistry
from llm_pipeline.steps.configure import run_configure
from llm_pipeline.steps.undeploy_preflight import run_undeploy_preflight
from llm_pipeline.vertex.submit import compile_for_vertex

from ..pipelines.spec_reading import constant, defaults, every_task
from ..registry.vertex_standin import VertexStandIn
from .conftest import PROJECT, REGION

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "small2vm16gpu.json"
SA = "trainer@test-project.iam.gserviceaccount.com"


def config_of(path: Path, *overrides: str) -> PipelineConfig:
    return load_config(path, [f"vertex.service_account={SA}", *overrides]).config


def preflight(*args: str, config: Path = CONFIG) -> int:
    """`pipeline.py --config CONFIG --preflight ARGS` in a fresh bucket, polling at once."""
    root = f"gs://runs-{uuid.uuid4().hex[:12]}/pipelines"
    where = ["--project", PROJECT, "--region", REGION, "--pipeline-root", root]
    flags = ["--preflight", "--poll-seconds", "0", "--set", f"vertex.service_account={SA}"]
    return cli.main(["--config", str(config), *where, *flags, *args])


def submitted(api: VertexStandIn) -> dict[str, Any]:
    (call,) = [c for c in api.calls if c.method == "POST" and c.path.endswith("/pipelineJobs")]
    return dict(call.body)


def sections_the_steps_get(job: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """What the configure step hands the other steps, computed by its own body from the
    submitted spec's config constant and the submitted parameter values (each as its
    declared type: REST sends every number as a double, an executor gets an integer one
    back as an integer)."""
    import json

    declared = job["pipelineSpec"]["root"]["inputDefinitions"]["parameters"]
    values = {
        name: int(value) if declared[name]["parameterType"] == "NUMBER_INTEGER" else value
        for name, value in job["runtimeConfig"]["parameterValues"].items()
    }
    configure = every_task(job["pipelineSpec"])["configure"]
    sections = run_configure(
        {
            "config": constant(configure, "config"),
            "resolved": SimpleNamespace(path=str(tmp_path / "resolved.json")),
            **values,
            "project": PROJECT,
            "region": REGION,
        }
    )
    return {name: json.loads(text) for name, text in sections.items()}


@pytest.mark.parametrize(
    ("config_name", "examples"),
    [
        # train, validation: a few dozen, and one per training GPU at least; test: a
        # handful, and one per GPU of the one node that evaluates.
        ("small1vm1gpu.json", {"train": 32, "validation": 8, "test": 8}),
        ("small2vm16gpu.json", {"train": 32, "validation": 32, "test": 16}),
        ("xxl2vm16gpu.json", {"train": 32, "validation": 32, "test": 16}),
        ("xxl8vm16gpu.json", {"train": 128, "validation": 128, "test": 16}),
    ],
)
def test_a_preflight_is_tiny_on_the_same_cluster(config_name: str, examples: dict) -> None:
    real = config_of(REPO / "configs" / config_name, "vertex.pipeline_root=gs://acme/runs")
    tiny = preflight_config(real)
    timeless = {"exclude": {"timeout"}}
    assert tiny.cluster.model_dump(**timeless) == real.cluster.model_dump(**timeless)
    assert tiny.cluster.timeout == "14400s"
    assert tiny.vertex.image_uri() == real.vertex.image_uri()
    assert tiny.vertex.image_uri("serve") == real.vertex.image_uri("serve")
    assert tiny.data.max_samples == examples
    assert (tiny.train.max_steps, tiny.train.save_steps, tiny.train.eval_steps) == (2, 2, 2)
    assert tiny.evaluate.max_samples == examples["test"]
    assert tiny.model == real.model and tiny.task == real.task
    assert tiny.deploy.model_display_name == f"{real.deploy.model_display_name}-preflight"
    assert tiny.deploy.endpoint_name() == f"{real.deploy.endpoint_name()}-preflight"
    assert tiny.deploy_policy.override == "always"  # the gate never blocks a smoke test
    assert not tiny.vertex.enable_caching and tiny.vertex.experiment is None
    assert preflight_config(real, deploy=False).deploy_policy.override == "never"


def test_a_preflight_writes_nothing_the_real_run_reads(tmp_path: Path) -> None:
    from llm_pipeline.pipelines.custom_jobs import base_output_directory

    real = config_of(CONFIG, "vertex.pipeline_root=gs://acme/runs")
    tiny = preflight_config(real)
    # The training job's folder, hence AIP_CHECKPOINT_DIR, is the preflight's own.
    assert base_output_directory(real) == "gs://acme/runs/t5-small-cnndm-2x16/finetune"
    assert base_output_directory(tiny) == "gs://acme/runs/t5-small-cnndm-2x16-preflight/finetune"
    named = config_of(
        CONFIG,
        "cluster.base_output_directory=gs://acme/jobs/t5/",
        "train.checkpoint_dir=gs://acme/ckpt",
        'data.max_samples={"train": 10}',
        "evaluate.max_samples=4",
    )
    tiny = preflight_config(named)
    assert tiny.cluster.base_output_directory == "gs://acme/jobs/t5-preflight"
    assert tiny.train.checkpoint_dir == "gs://acme/ckpt-preflight"
    # Smaller caps of the config's own stay.
    assert tiny.data.max_samples["train"] == 10 and tiny.evaluate.max_samples == 4


def test_a_preflight_name_too_long_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        preflight_config(config_of(CONFIG, f"name=t{'x' * 125}"))
    assert caught.value.exit_code == 2
    assert caught.value.problems[0].startswith("name:")


def test_the_tiny_values_reach_the_job_and_the_steps(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    api.job_states = ["PIPELINE_STATE_PENDING", "PIPELINE_STATE_SUCCEEDED"]
    assert preflight() == 0, capsys.readouterr().err
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Preflight passed (its endpoint t5-small-cnndm-2x16-endpoint-preflight serves nothing "
        "again): submit t5-small-cnndm-2x16 without --preflight."
    )
    job = submitted(api)
    real = config_of(CONFIG)
    tiny = preflight_config(real)
    assert job["displayName"] == "t5-small-cnndm-2x16-preflight"
    assert job["runtimeConfig"]["parameterValues"] == parameter_defaults(tiny)
    assert job["runtimeConfig"]["parameterValues"]["deploy_override"] == "always"

    steps_get = sections_the_steps_get(job, tmp_path)
    assert steps_get["data"]["max_samples"] == {"train": 32, "validation": 32, "test": 16}
    assert steps_get["train"]["max_steps"] == 2 and steps_get["train"]["save_steps"] == 2
    assert steps_get["evaluate"]["max_samples"] == 16
    assert steps_get["deploy"]["model_display_name"] == "t5-small-cnndm-2x16-preflight"
    assert steps_get["deploy"]["endpoint_display_name"] == "t5-small-cnndm-2x16-endpoint-preflight"
    assert steps_get["deploy_policy"]["override"] == "always"
    assert steps_get["vertex"]["project"] == PROJECT
    assert steps_get["cluster"] == real.cluster.model_dump(mode="json") | {"timeout": "14400s"}

    # The same images and machines: the training job's pools are the real run's, whole.
    spec = job["pipelineSpec"]
    in_project = real.vertex.model_copy(update={"project": PROJECT})  # as submitted
    real_spec = _compiled(real.model_copy(update={"vertex": in_project}), tmp_path)
    for job_component in ("comp-finetune", "comp-evaluate"):
        assert (
            defaults(spec, job_component)["worker_pool_specs"]
            == (defaults(real_spec, job_component)["worker_pool_specs"])
        )
    assert (
        defaults(spec, "comp-finetune")["strategy"]
        == defaults(real_spec, "comp-finetune")["strategy"]
    )
    tasks = every_task(spec)
    assert not any(t.get("cachingOptions", {}).get("enableCache") for t in tasks.values())
    # The last step empties the preflight's endpoint once the others have ended, however.
    cleanup = tasks["undeploy-preflight"]
    assert cleanup["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    # The config the steps run with, placed where the flags said to run it.
    ran = PipelineConfig.model_validate_json(constant(cleanup, "config"))
    assert ran.model_copy(update={"vertex": tiny.vertex}) == tiny
    assert (ran.vertex.project, ran.vertex.region) == (PROJECT, REGION)
    assert ran.vertex.pipeline_root == job["runtimeConfig"]["gcsOutputDirectory"]


def _compiled(config: PipelineConfig, tmp_path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(compile_for_vertex(config, tmp_path / "real").read_text())


def test_a_failed_preflight_exits_1_and_says_what_next(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.job_states = ["PIPELINE_STATE_RUNNING", "PIPELINE_STATE_FAILED"]
    assert preflight() == 1
    out = capsys.readouterr().out
    assert "Pipeline did not succeed." in out
    assert "Preflight failed: the console shows the step that failed" in out
    assert "undeploy-preflight, empties t5-small-cnndm-2x16-endpoint-preflight" in out


def test_no_deploy_stops_at_the_gate(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.job_states = ["PIPELINE_STATE_SUCCEEDED"]
    assert preflight("--no-deploy") == 0
    job = submitted(api)
    assert job["runtimeConfig"]["parameterValues"]["deploy_override"] == "never"
    assert "undeploy-preflight" not in every_task(job["pipelineSpec"])  # nothing to empty
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Preflight passed: submit t5-small-cnndm-2x16 without --preflight."
    )


def test_dry_run_shows_the_preflight_and_calls_nothing(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    assert preflight("--dry-run") == 0
    out = capsys.readouterr().out
    assert "Steps of t5-small-cnndm-2x16-preflight.yaml (8):" in out
    assert "  deploy_override = 'always'" in out
    assert "  undeploy-preflight (once the others end, however they end): pipeline task" in out
    assert "Preflight of t5-small-cnndm-2x16, what differs from a real run:" in out
    assert "  train.max_steps: null → 2" in out
    assert '  data.max_samples: {} → {"train": 32, "validation": 32, "test": 16}' in out
    assert "Would submit a preflight run to Vertex AI" in out
    assert api.calls == []


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--schedule", "0 3 * * 1"], "--preflight apply to one run, not to a --schedule"),
        (["--compile", "out.yaml"], "--compile only writes the spec"),
    ],
)
def test_a_preflight_is_one_submitted_run(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str], args: list[str], problem: str
) -> None:
    assert preflight(*args) == 2
    assert problem in capsys.readouterr().err
    assert api.calls == []


def test_no_deploy_needs_preflight(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--config", str(CONFIG), "--no-deploy"]) == 2
    assert "--no-deploy only applies with --preflight" in capsys.readouterr().err


def test_the_last_step_empties_the_preflight_endpoint_and_no_other(api: VertexStandIn) -> None:
    """Against the stand-in: a version serves on the preflight endpoint and another on the
    real one; the exit step undeploys the first only, and again finds nothing to do."""
    real = config_of(CONFIG)
    tiny = preflight_config(real)
    for config in (real, tiny):
        registry = VertexRegistry(
            project=PROJECT,
            region=REGION,
            deploy=config.deploy,
            serving_image=config.vertex.image_uri("serve"),
        )
        version = registry.register(
            model=config.deploy.model_display_name, model_dir="gs://b/model", metrics={}
        )
        registry.deploy(version, config.deploy.endpoint_name(), probe=["An article."])
    runtime = {"project": PROJECT, "region": REGION}

    retired = run_undeploy_preflight({"config": tiny.model_dump_json(), **runtime})

    assert retired == ["t5-small-cnndm-2x16-preflight@1"]
    served = {e["displayName"]: e.get("deployedModels", []) for e in api.endpoints.values()}
    assert served["t5-small-cnndm-2x16-endpoint-preflight"] == []
    assert len(served["t5-small-cnndm-2x16-endpoint"]) == 1
    assert run_undeploy_preflight({"config": tiny.model_dump_json(), **runtime}) == []
    # A run that failed before deploy: no endpoint yet, nothing to do.
    other = preflight_config(config_of(CONFIG, "deploy.model_display_name=never-deployed"))
    assert run_undeploy_preflight({"config": other.model_dump_json(), **runtime}) == []
    # Never a real endpoint.
    with pytest.raises(SystemExit) as refused:
        run_undeploy_preflight({"config": real.model_dump_json(), **runtime})
    assert refused.value.code == 1
    assert len(served["t5-small-cnndm-2x16-endpoint"]) == 1
