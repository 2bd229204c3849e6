"""Every shipped config compiles for Vertex AI into the spec it asks for: images, worker
pools, evaluation's node, caching and retries per step, the run parameters with the
config's values as defaults, and the gate's condition. No value a task gets at run time
carries a placeholder Vertex would have to fill in. The specs kept under `pipelines/` are
exactly what the code compiles."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_pipeline.config import PipelineConfig, load_config
from llm_pipeline.config.run_parameters import RUN_PARAMETERS, parameter_defaults
from llm_pipeline.local import step_order
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.pipelines.custom_jobs import STEP_LABEL, custom_job_settings
from llm_pipeline.vertex import compile_pipeline
from llm_pipeline.vertex.compile import compile_shipped_pipelines

from .spec_reading import constant, defaults, every_task

REPO = Path(__file__).resolve().parents[2]
VERTEX_CONFIGS = [
    "distilbert-classify-1vm2gpu.json",
    "llama2-7b-dpo-lora-1vm1gpu.json",
    "llama2-7b-lora-1vm8gpu.json",
    "opt1b3-dpo-1vm8gpu.json",
    "opt1b3-sft-1vm8gpu.json",
    "small1vm1gpu.json",
    "small2vm16gpu.json",
    "xxl2vm16gpu.json",
    "xxl8vm16gpu.json",
]
KFP_TYPES = {str: "STRING", int: "NUMBER_INTEGER", float: "NUMBER_DOUBLE"}


def config_of(name: str, *overrides: str) -> PipelineConfig:
    return load_config(REPO / "configs" / name, ["vertex.project=acme", *overrides]).config


def compiled(config: PipelineConfig, tmp_path: Path, *, scheduled: bool = False) -> dict[str, Any]:
    pipeline = build_pipeline(config, target="vertex", scheduled=scheduled)
    return yaml.safe_load(compile_pipeline(pipeline, tmp_path / "p.yaml").read_text())


@pytest.fixture(scope="module")
def shipped_spec(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    """`shipped_spec(name)`: configs/<name> as shipped (for project acme), compiled once for
    the module; the tests below only read it. Each compile takes about a second, and five
    tests read each of the seven configs' specs."""
    specs: dict[str, dict[str, Any]] = {}

    def spec(config_name: str) -> dict[str, Any]:
        if config_name not in specs:
            folder = tmp_path_factory.mktemp("vertex-spec")
            specs[config_name] = compiled(config_of(config_name), folder)
        return specs[config_name]

    return spec


@pytest.mark.parametrize("config_name", VERTEX_CONFIGS)
def test_finetune_runs_as_a_custom_job_on_the_configured_pools(
    config_name: str, shipped_spec: Callable[[str], dict[str, Any]]
) -> None:
    config = config_of(config_name)
    spec = shipped_spec(config_name)
    cluster = config.cluster
    machine = {
        "machine_type": cluster.machine_type,
        "accelerator_type": cluster.accelerator_type,
        "accelerator_count": float(cluster.accelerator_count),
    }
    disk = {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 200.0}
    expected = [(1.0, machine, disk)]
    if cluster.node_count > 1:
        expected.append((float(cluster.node_count - 1), machine, disk))
    values = defaults(spec, "comp-finetune")
    pools = values["worker_pool_specs"]
    assert [(p["replica_count"], p["machine_spec"], p["disk_spec"]) for p in pools] == expected
    for pool in pools:
        container = pool["container_spec"]
        assert container["image_uri"] == config.vertex.image_uri()
        assert container["args"][-2:] == ["--function_to_execute", "finetune"]
    assert values["strategy"] == ("SPOT" if cluster.spot else "STANDARD")
    assert values["restart_job_on_worker_restart"] is True
    assert values["labels"] == {STEP_LABEL: "finetune"}
    # The job runs with the pools compiled into its default, as GCPC builds them: no task
    # hands it others at run time.
    tasks = spec["root"]["dag"]["tasks"]
    assert "worker_pool_specs" not in tasks["finetune"]["inputs"]["parameters"]


#: Placeholders a task argument may be, whole: GCPC passes its project and location ones
#: as task arguments itself (`_implementation/llm/deployment_graph.py`), and KFP documents
#: `dsl.PIPELINE_JOB_NAME_PLACEHOLDER` as one.
ARGUMENT_PLACEHOLDERS = {
    "{{$.pipeline_google_cloud_project_id}}",
    "{{$.pipeline_google_cloud_location}}",
    "{{$.pipeline_job_name}}",
}


@pytest.mark.parametrize("config_name", VERTEX_CONFIGS)
def test_no_run_time_value_carries_a_placeholder(
    config_name: str, shipped_spec: Callable[[str], dict[str, Any]]
) -> None:
    """The executor placeholder is only where GCPC puts it, in the custom jobs' compiled
    worker pools; whether Vertex would fill in one inside a value passed at run time is not
    documented (see `llm_pipeline.pipelines.custom_jobs`)."""
    spec = shipped_spec(config_name)
    for name, task in every_task(spec).items():
        for key, value in task.get("inputs", {}).get("parameters", {}).items():
            given = value.get("runtimeValue", {}).get("constant")
            if isinstance(given, str) and given not in ARGUMENT_PLACEHOLDERS:
                assert "{{$" not in given, f"{name}.{key} carries a placeholder"
        assert "worker_pool_specs" not in task.get("inputs", {}).get("parameters", {}), name
    escaped = [
        component
        for component, body in spec["components"].items()
        if "{{$.json_escape" in json.dumps(body)
    ]
    assert sorted(escaped) == ["comp-evaluate", "comp-finetune"]
    for component in escaped:
        pools = defaults(spec, component)["worker_pool_specs"]
        for pool in pools:
            assert pool["container_spec"]["args"][:2] == [
                "--executor_input",
                "{{$.json_escape[1]}}",
            ]


@pytest.mark.parametrize("config_name", VERTEX_CONFIGS)
def test_evaluate_runs_on_one_whole_training_node(
    config_name: str, shipped_spec: Callable[[str], dict[str, Any]]
) -> None:
    config = config_of(config_name)
    values = defaults(shipped_spec(config_name), "comp-evaluate")
    (pool,) = values["worker_pool_specs"]
    assert pool["replica_count"] == 1.0
    assert pool["machine_spec"] == {
        "machine_type": config.cluster.machine_type,
        "accelerator_type": config.cluster.accelerator_type,
        "accelerator_count": float(config.cluster.accelerator_count),
    }
    assert pool["container_spec"]["args"][-2:] == ["--function_to_execute", "evaluate"]
    assert values["strategy"] == "STANDARD"  # evaluation cannot resume after a preemption
    assert values["labels"] == {STEP_LABEL: "evaluate"}


def test_a_cpu_cluster_evaluates_in_a_plain_task(tmp_path: Path) -> None:
    config = config_of("small1vm1gpu.json", "cluster.accelerator_type=null")
    spec = compiled(config, tmp_path)
    assert "worker_pool_specs" not in defaults(spec, "comp-evaluate")


@pytest.mark.parametrize("config_name", VERTEX_CONFIGS)
def test_parameters_carry_the_configs_values_as_defaults(
    config_name: str, shipped_spec: Callable[[str], dict[str, Any]]
) -> None:
    config = config_of(config_name)
    spec = shipped_spec(config_name)
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert set(parameters) == set(RUN_PARAMETERS)
    expected = parameter_defaults(config)
    for name, parameter in parameters.items():
        assert parameter["parameterType"] == KFP_TYPES[RUN_PARAMETERS[name].kind], name
        assert parameter["defaultValue"] == expected[name], name
        assert RUN_PARAMETERS[name].path in parameter["description"]
    assert expected["epochs"] == config.train.epochs
    assert expected["gate_metric"] == config.deploy_policy.metric
    # The cluster's shape is compiled in (the worker pools), not a run parameter.
    assert "node_count" not in parameters
    # Every parameter goes to configure, the first step, which validates the run's config.
    configure = spec["root"]["dag"]["tasks"]["configure"]["inputs"]["parameters"]
    for name in RUN_PARAMETERS:
        assert configure[name] == {"componentInputParameter": name}
    assert json.loads(constant(spec["root"]["dag"]["tasks"]["configure"], "config"))["name"] == (
        config.name
    )


@pytest.mark.parametrize("scheduled", [False, True])
def test_caching_retries_and_names_per_step(scheduled: bool, tmp_path: Path) -> None:
    config = config_of("small2vm16gpu.json", 'vertex.labels={"team": "nlp"}')
    spec = compiled(config, tmp_path, scheduled=scheduled)
    tasks = spec["root"]["dag"]["tasks"]
    branch = next(task for name, task in tasks.items() if name.startswith("condition"))
    inner = spec["components"][branch["componentRef"]["name"]]["dag"]["tasks"]
    every = {**{n: t for n, t in tasks.items() if not n.startswith("condition")}, **inner}
    assert set(every) == {
        "configure",
        "download",
        "preprocess",
        "finetune",
        "evaluate",
        "should-deploy",
        "deploy",
    }
    cached = {name for name, task in every.items() if task["cachingOptions"].get("enableCache")}
    # A schedule retrains on fresh data: its download is never taken from the cache.
    assert cached == ({"preprocess"} if scheduled else {"download", "preprocess"})
    retried = {
        name: t["retryPolicy"]["maxRetryCount"] for name, t in every.items() if "retryPolicy" in t
    }
    assert retried == {"download": 3, "preprocess": 3, "should-deploy": 3}
    assert {name: task["taskInfo"]["name"] for name, task in every.items()} == {
        name: name for name in every
    }
    labels = defaults(spec, "comp-finetune")["labels"]
    assert labels == {"team": "nlp", STEP_LABEL: "finetune"}


def test_the_pipeline_root_comes_from_the_config(tmp_path: Path) -> None:
    config = config_of("small1vm1gpu.json", "vertex.pipeline_root=gs://acme-runs/pipelines")
    assert compiled(config, tmp_path)["defaultPipelineRoot"] == "gs://acme-runs/pipelines"


@pytest.mark.parametrize("config_name", VERTEX_CONFIGS)
def test_deploy_runs_only_when_the_gate_says_so(
    config_name: str, shipped_spec: Callable[[str], dict[str, Any]]
) -> None:
    spec = shipped_spec(config_name)
    root = spec["root"]["dag"]["tasks"]
    gate = root["should-deploy"]
    assert sorted(gate["dependentTasks"]) == ["configure", "evaluate"]
    assert gate["cachingOptions"] == {}  # never cached: it depends on what is served now
    (branch,) = (task for name, task in root.items() if name.startswith("condition"))
    assert branch["triggerPolicy"]["condition"] == (
        "inputs.parameter_values['pipelinechannel--should-deploy-Output'] == true"
    )
    inner = spec["components"][branch["componentRef"]["name"]]["dag"]["tasks"]
    assert set(inner) == {"deploy"}
    assert inner["deploy"]["inputs"]["parameters"]["gate_served"]["componentInputParameter"] == (
        "pipelinechannel--should-deploy-served_version"
    )
    config = json.loads(constant(root["configure"], "config"))
    assert config["deploy"]["target"] == "vertex"


def test_custom_job_settings_whole() -> None:
    config = config_of(
        "xxl2vm16gpu.json",
        "vertex.pipeline_root=gs://acme-runs/pipelines",
        "vertex.service_account=trainer@acme.iam.gserviceaccount.com",
        "vertex.network=projects/1/global/networks/vpc",
        "vertex.tensorboard=projects/1/locations/us-central1/tensorboards/2",
        'vertex.labels={"team": "nlp"}',
        "cluster.spot=true",
        "cluster.timeout=86400s",
    )
    assert custom_job_settings(config) == {
        "display_name": "llm-finetune-t5-xxl-cnndm-2x16",
        "replica_count": 2,
        "machine_type": "a2-megagpu-16g",
        "accelerator_type": "NVIDIA_TESLA_A100",
        "accelerator_count": 16,
        "boot_disk_type": "pd-ssd",
        "boot_disk_size_gb": 200,
        "timeout": "86400s",
        "restart_job_on_worker_restart": True,
        "strategy": "SPOT",
        "service_account": "trainer@acme.iam.gserviceaccount.com",
        "network": "projects/1/global/networks/vpc",
        "tensorboard": "projects/1/locations/us-central1/tensorboards/2",
        "base_output_directory": "gs://acme-runs/pipelines/t5-xxl-cnndm-2x16/finetune",
        "labels": {"team": "nlp", STEP_LABEL: "finetune"},
    }


def test_local_graph_runs_the_components_themselves() -> None:
    config = load_config(REPO / "configs" / "local.json").config
    pipeline = build_pipeline(config, target="local")
    executor = pipeline.pipeline_spec.deployment_spec["executors"]["exec-finetune"]["container"]
    assert "CustomJob" not in str(executor)
    assert step_order(pipeline) == [
        "configure",
        "download",
        "preprocess",
        "finetune",
        "evaluate",
        "should-deploy",
        "deploy",
    ]


def test_shipped_specs_are_what_the_code_compiles(tmp_path: Path) -> None:
    fresh = compile_shipped_pipelines(REPO / "configs", tmp_path)
    assert sorted(path.name for path in fresh) == sorted(
        name.replace(".json", ".yaml") for name in VERTEX_CONFIGS
    )
    for path in fresh:
        shipped = REPO / "pipelines" / path.name
        assert shipped.exists(), f"pipelines/{path.name} missing: run `make docs`"
        assert shipped.read_text() == path.read_text(), f"{shipped} is stale: run `make docs`"


def test_tensorboard_without_an_output_folder_is_refused() -> None:
    from llm_pipeline.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        load_config(REPO / "configs" / "small1vm1gpu.json", ["vertex.tensorboard=tb"])
    assert caught.value.problems == [
        "vertex.tensorboard needs a folder for the training job's logs: set "
        "vertex.pipeline_root or cluster.base_output_directory"
    ]


def test_the_reference_projects_zone_and_cluster_prefix_reach_the_job() -> None:
    """The flat keys map onto settings the job uses: the zone's region runs it, the
    cluster prefix names it."""
    raw = json.loads((REPO / "configs" / "small1vm1gpu.json").read_text())
    raw.update({"zone": "europe-west4-a", "cluster_prefix": "t5-run"})
    raw["vertex"].pop("region", None)
    config = load_config(raw=raw).config
    assert config.vertex.region == "europe-west4"
    assert custom_job_settings(config)["display_name"] == f"t5-run-{config.name}"


def test_no_token_of_the_compiling_environment_reaches_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec is uploaded and shown in the console: a token set where it was compiled
    stays out of it, with DeepSpeed's multi-node launcher too."""
    token = "hf_planted_secret_123"
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GOOGLE_OAUTH_ACCESS_TOKEN"):
        monkeypatch.setenv(name, token)
    config = config_of("small2vm16gpu.json", "cluster.launcher=deepspeed")
    pipeline = build_pipeline(config, target="vertex")
    assert token not in compile_pipeline(pipeline, tmp_path / "p.yaml").read_text()


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("", "--compile '{dir}' is a folder; name the spec file, e.g. '{dir}/pipeline.yaml'"),
        ("notes.txt/spec.yaml", "cannot be written: '{dir}/notes.txt' is a file, not a folder"),
        ("spec.txt", "--compile '{dir}/spec.txt' must end with .yaml"),
    ],
    ids=["a folder", "under a file", "not yaml"],
)
def test_compile_to_a_path_that_cannot_take_the_spec_is_one_line(
    target: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder, a path under a file, or another suffix was KFP's traceback after the build."""
    from llm_pipeline import cli

    (tmp_path / "notes.txt").write_text("mine")
    config = str(REPO / "configs" / "small1vm1gpu.json")
    out = str(tmp_path / target) if target else str(tmp_path)
    assert cli.main(["--config", config, "--project", "acme-ml", "--compile", out]) == 2
    err = capsys.readouterr().err
    assert problem.format(dir=tmp_path) in err and "Traceback" not in err
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


#: Compiles argv[1] to argv[2] in a process that the kernel kills (SIGXFSZ, uncaught, as
#: kill -9 would: no handler, no cleanup) once it writes past 4 KiB into any file: mid-spec.
_COMPILE_KILLED_WRITING = """
import resource, signal, sys
from pathlib import Path
from llm_pipeline.config import load_config
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.vertex import compile_pipeline
pipeline = build_pipeline(load_config(Path(sys.argv[1]), ["vertex.project=acme"]).config,
                          target="vertex")
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
compile_pipeline(pipeline, sys.argv[2])
"""


def test_a_compile_killed_while_writing_leaves_the_spec_that_was_there(tmp_path: Path) -> None:
    """KFP wrote the spec in place: `--compile out.yaml` killed mid-write left the first 4 KiB
    of a spec where the user's previous one had been."""
    import os
    import signal
    import subprocess
    import sys

    target = tmp_path / "out.yaml"
    target.write_text("# the spec from before\n")
    config = str(REPO / "configs" / "small1vm1gpu.json")
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE_KILLED_WRITING, config, str(target)],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == -signal.SIGXFSZ, done.stderr[-2000:]
    assert target.read_text() == "# the spec from before\n"
