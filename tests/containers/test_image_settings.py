"""One setting, vertex.image_repository, names both images; the package's version tags them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llm_pipeline import __version__
from llm_pipeline.config import ConfigError, DeployConfig, VertexConfig, load_config

from .dockerfile import REPO

MINIMAL = {"data": {"dataset": "some/dataset"}, "model": {"source": "t5-small"}}


def test_both_images_follow_from_the_repository_and_the_version() -> None:
    vertex = VertexConfig(project="acme", image_repository="{region}-docker.pkg.dev/{project}/ml/")

    assert vertex.image_uri("train") == f"us-central1-docker.pkg.dev/acme/ml/train:{__version__}"
    assert vertex.image_uri("serve") == f"us-central1-docker.pkg.dev/acme/ml/serve:{__version__}"
    assert vertex.image_uri() == vertex.image_uri("train")


def test_by_default_they_are_the_published_images() -> None:
    vertex = VertexConfig()

    assert vertex.image_uri("train") == (
        f"us-docker.pkg.dev/llm-pipeline/llm-pipeline/train:{__version__}"
    )
    assert vertex.image_uri("serve") == (
        f"us-docker.pkg.dev/llm-pipeline/llm-pipeline/serve:{__version__}"
    )


def test_one_image_can_be_named_outright() -> None:
    vertex = VertexConfig(project="acme", serve_image="eu.gcr.io/{project}/gpu-serve:7")

    assert vertex.image_uri("serve") == "eu.gcr.io/acme/gpu-serve:7"
    assert vertex.image_uri("train").endswith(f"/train:{__version__}")


def test_components_default_to_the_published_train_image() -> None:
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


def test_a_vertex_deploy_registers_the_serve_image(monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_pipeline.registry import open_registry
    from llm_pipeline.registry.vertex import VertexRegistry

    monkeypatch.setattr(VertexRegistry, "_sdk", lambda self: None)  # no Google Cloud here
    vertex = VertexConfig(project="acme", image_repository="us-docker.pkg.dev/{project}/ml")

    registry = open_registry(DeployConfig(target="vertex"), vertex)

    assert isinstance(registry, VertexRegistry)
    assert registry.serving_image == f"us-docker.pkg.dev/acme/ml/serve:{__version__}"


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
