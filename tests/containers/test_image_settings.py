"""One setting, vertex.image_repository, names the images; the package's version tags them,
and by default they are in the project and region the pipeline runs in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llm_pipeline import __version__, cli
from llm_pipeline.config import ConfigError, DeployConfig, VertexConfig, load_config

from .dockerfile import REPO

MINIMAL = {"data": {"dataset": "some/dataset"}, "model": {"source": "t5-small"}}


def test_the_images_follow_from_the_repository_and_the_version() -> None:
    vertex = VertexConfig(project="acme", image_repository="eu-docker.pkg.dev/{project}/ml/")

    assert vertex.image_uri("train") == f"eu-docker.pkg.dev/acme/ml/train:{__version__}"
    assert vertex.image_uri("serve") == f"eu-docker.pkg.dev/acme/ml/serve:{__version__}"
    assert vertex.image_uri("serve-cuda") == f"eu-docker.pkg.dev/acme/ml/serve-cuda:{__version__}"
    assert vertex.image_uri() == vertex.image_uri("train")


def test_by_default_they_are_in_your_project_in_the_region_the_pipeline_runs_in() -> None:
    """Defect 12: the default named a project nobody had built images in."""
    vertex = VertexConfig(project="acme", region="europe-west4")

    assert vertex.image_uri("train") == (
        f"europe-west4-docker.pkg.dev/acme/llm-pipeline/train:{__version__}"
    )
    assert VertexConfig(project="acme").image_uri("serve") == (
        f"us-central1-docker.pkg.dev/acme/llm-pipeline/serve:{__version__}"
    )


def test_without_a_project_the_images_cannot_be_named() -> None:
    assert VertexConfig(project="acme").unresolved_image_problems() == []
    assert VertexConfig(train_image="eu.gcr.io/team/train:1").unresolved_image_problems() == []
    (problem,) = VertexConfig().unresolved_image_problems()
    assert problem.startswith("vertex.image_repository '{region}-docker.pkg.dev/{project}/")
    assert "--project" in problem
    assert VertexConfig().image_uri("train").startswith("us-central1-docker.pkg.dev/PROJECT/")


def test_compiling_without_a_project_is_refused_naming_the_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    config = str(REPO / "configs" / "small1vm1gpu.json")

    assert cli.main(["--config", config, "--compile", str(spec)]) == 2
    assert "vertex.image_repository" in capsys.readouterr().err and not spec.exists()

    assert (
        cli.main(["--config", config, "--set", "vertex.project=acme", "--compile", str(spec)]) == 0
    )
    assert f"us-central1-docker.pkg.dev/acme/llm-pipeline/train:{__version__}" in spec.read_text()


def test_compile_takes_the_project_and_region_the_images_are_named_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    config = str(REPO / "configs" / "small1vm1gpu.json")
    where = ["--project", "acme-ml", "--region", "europe-west4"]

    assert cli.main(["--config", config, "--compile", str(spec), *where]) == 0
    assert f"europe-west4-docker.pkg.dev/acme-ml/llm-pipeline/train:{__version__}" in (
        spec.read_text()
    )
    assert cli.main(["--config", config, "--compile", str(spec), "--project", "Acme"]) == 2
    assert "--project 'Acme' is not" in capsys.readouterr().err


def test_a_run_submitted_with_project_and_region_flags_uses_their_images(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = str(REPO / "configs" / "small1vm1gpu.json")
    where = ["--project", "acme-ml", "--region", "europe-west4", "--pipeline-root", "gs://bkt/runs"]

    assert cli.main(["--config", config, *where, "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert f"image europe-west4-docker.pkg.dev/acme-ml/llm-pipeline/train:{__version__}" in shown
    assert "PROJECT" not in shown


def test_one_image_can_be_named_outright() -> None:
    vertex = VertexConfig(project="acme", serve_image="eu.gcr.io/{project}/gpu-serve:7")

    assert vertex.image_uri("serve") == "eu.gcr.io/acme/gpu-serve:7"
    assert vertex.image_uri("train").endswith(f"/train:{__version__}")


def test_components_default_to_the_default_train_image() -> None:
    from llm_pipeline.components import DEFAULT_IMAGE

    assert VertexConfig().image_uri("train") == DEFAULT_IMAGE


@pytest.mark.parametrize(
    ("old", "replacement"),
    [("vertex.image", "vertex.train_image"), ("deploy.serving_image", "vertex.serve_image")],
)
def test_an_old_image_key_is_refused_with_what_replaces_it(old: str, replacement: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(raw=dict(MINIMAL), overrides=[f"{old}=r.example/x:1", "train.epochs=0"])

    assert f"{old}: replaced by vertex.image_repository" in str(err.value)
    assert replacement in str(err.value)
    # Every other problem is still listed with it.
    assert "train.epochs: must be > 0" in str(err.value)


@pytest.mark.parametrize(
    ("accelerator", "serve_image", "expected"),
    [
        (None, None, f"us-docker.pkg.dev/acme/ml/serve:{__version__}"),
        ("NVIDIA_TESLA_T4", None, f"us-docker.pkg.dev/acme/ml/serve-cuda:{__version__}"),
        ("NVIDIA_L4", "eu.gcr.io/{project}/mine:2", "eu.gcr.io/acme/mine:2"),
        (None, "eu.gcr.io/{project}/mine:2", "eu.gcr.io/acme/mine:2"),
    ],
)
def test_a_vertex_deploy_registers_the_cuda_server_when_it_has_an_accelerator(
    monkeypatch: pytest.MonkeyPatch, accelerator: str | None, serve_image: str | None, expected: str
) -> None:
    """Defect 4: a GPU deploy registered the CPU image and left its GPU idle."""
    from llm_pipeline.registry import open_registry
    from llm_pipeline.registry.vertex.registry import VertexRegistry

    monkeypatch.setattr(VertexRegistry, "_sdk", lambda self: None)  # no Google Cloud here
    vertex = VertexConfig(
        project="acme", image_repository="us-docker.pkg.dev/{project}/ml", serve_image=serve_image
    )
    gpus = {"accelerator_type": accelerator, "accelerator_count": 1} if accelerator else {}

    registry = open_registry(DeployConfig(target="vertex", **gpus), vertex)

    assert isinstance(registry, VertexRegistry)
    assert registry.serving_image == expected


def test_setup_py_takes_its_version_from_the_package() -> None:
    done = subprocess.run(
        [sys.executable, "setup.py", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert done.stdout.strip().splitlines()[-1] == __version__


def test_a_template_for_an_artifact_registry_repository_names_its_projects_images() -> None:
    from llm_pipeline.vertex.templates import artifact_registry_location

    host = "https://europe-west4-kfp.pkg.dev/acme-ml/pipelines"
    assert artifact_registry_location(host) == ("acme-ml", "europe-west4")
    assert artifact_registry_location("http://127.0.0.1:8000/acme-ml/pipelines") is None
