"""Each Vertex config compiles to a spec whose training job has the worker pools it asks for."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_pipeline.config import load_config
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.pipelines.vertex import custom_job_settings
from llm_pipeline.runner import compile_pipeline

REPO = Path(__file__).resolve().parents[2]
VERTEX_CONFIGS = ["small1vm1gpu.json", "small2vm16gpu.json", "xxl2vm16gpu.json", "xxl8vm16gpu.json"]


def compiled_finetune(config_name: str, tmp_path: Path, *overrides: str) -> dict[str, Any]:
    config = load_config(REPO / "configs" / config_name, overrides).config
    path = compile_pipeline(build_pipeline(config, target="vertex"), tmp_path / "p.yaml")
    spec = yaml.safe_load(path.read_text())
    return spec["components"]["comp-finetune"]["inputDefinitions"]["parameters"]


def defaults(parameters: dict[str, Any]) -> dict[str, Any]:
    return {name: p.get("defaultValue") for name, p in parameters.items()}


@pytest.mark.parametrize("config_name", VERTEX_CONFIGS)
def test_worker_pools_match_the_config(config_name: str, tmp_path: Path) -> None:
    config = load_config(REPO / "configs" / config_name, ["vertex.project=acme"]).config
    values = defaults(compiled_finetune(config_name, tmp_path, "vertex.project=acme"))
    pools = values["worker_pool_specs"]
    cluster = config.cluster
    machine = {
        "machine_type": cluster.machine_type,
        "accelerator_type": cluster.accelerator_type,
        "accelerator_count": float(cluster.accelerator_count),
    }
    disk = {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 200.0}
    expected_pools = [(1.0, machine, disk)]
    if cluster.node_count > 1:
        expected_pools.append((float(cluster.node_count - 1), machine, disk))
    assert [(p["replica_count"], p["machine_spec"], p["disk_spec"]) for p in pools] == (
        expected_pools
    )
    for pool in pools:
        container = pool["container_spec"]
        assert container["image_uri"] == "us-docker.pkg.dev/acme/llm-pipeline/train:0.1.0"
        assert container["args"][-2:] == ["--function_to_execute", "finetune"]
    assert values["strategy"] == ("SPOT" if cluster.spot else "STANDARD")
    assert values["restart_job_on_worker_restart"] is True
    assert values["timeout"] == "604800s"


def test_settings_payload_whole(tmp_path: Path) -> None:
    config = load_config(
        REPO / "configs" / "xxl2vm16gpu.json",
        [
            "vertex.project=acme",
            "vertex.pipeline_root=gs://acme-runs/pipelines",
            "vertex.service_account=trainer@acme.iam.gserviceaccount.com",
            "vertex.network=projects/1/global/networks/vpc",
            "vertex.tensorboard=projects/1/locations/us-central1/tensorboards/2",
            'vertex.labels={"team": "nlp"}',
            "cluster.spot=true",
            "cluster.timeout=86400s",
        ],
    ).config
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
        "labels": {"team": "nlp"},
    }


def test_local_graph_runs_the_component_itself() -> None:
    config = load_config(REPO / "configs" / "local.json").config
    spec = build_pipeline(config, target="local").pipeline_spec
    executor = spec.deployment_spec["executors"]["exec-finetune"]["container"]
    assert "CustomJob" not in str(executor)
    from llm_pipeline.runner import step_order

    assert step_order(build_pipeline(config, target="local")) == [
        "download",
        "preprocess",
        "finetune",
        "evaluate",
        "should-deploy",
        "deploy",
    ]


@pytest.mark.parametrize("config_name", VERTEX_CONFIGS)
def test_deploy_runs_only_when_the_gate_says_so(config_name: str, tmp_path: Path) -> None:
    config = load_config(REPO / "configs" / config_name, ["vertex.project=acme"]).config
    path = compile_pipeline(build_pipeline(config, target="vertex"), tmp_path / "p.yaml")
    spec = yaml.safe_load(path.read_text())
    root = spec["root"]["dag"]["tasks"]
    gate = root["should-deploy"]
    assert gate["dependentTasks"] == ["evaluate"]
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
    deploy_section = inner["deploy"]["inputs"]["parameters"]["deploy"]
    assert '"target":"vertex"' in deploy_section["runtimeValue"]["constant"].replace(" ", "")


def test_tensorboard_without_an_output_folder_is_refused() -> None:
    from llm_pipeline.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        load_config(REPO / "configs" / "small1vm1gpu.json", ["vertex.tensorboard=tb"])
    assert caught.value.problems == [
        "vertex.tensorboard needs a folder for the training job's logs: set "
        "vertex.pipeline_root or cluster.base_output_directory"
    ]
