"""cloudbuild.yaml and `make images` push both images at the package's version, where the
config's image settings look for them."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from llm_pipeline import __version__
from llm_pipeline.config import VertexConfig
from llm_pipeline.config.vertex import DEFAULT_IMAGE_REPOSITORY

from .dockerfile import REPO

IMAGE = "${_LOCATION}-docker.pkg.dev/$PROJECT_ID/${_REPOSITORY}/{name}:${_VERSION}"


def image(name: str) -> str:
    return IMAGE.replace("{name}", name)


def cloudbuild() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO / "cloudbuild.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def substitute(text: str, values: dict[str, str]) -> str:
    """Cloud Build's substitution of `$NAME` and `${NAME}`."""
    for name, value in values.items():
        text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return text


def test_builds_both_dockerfiles_and_pushes_both_images() -> None:
    build = cloudbuild()

    built = {}
    for step in build["steps"]:
        args = step["args"]
        assert args[0] == "build" and args[-1] == "."
        dockerfile = next(a.split("=", 1)[1] for a in args if a.startswith("--file="))
        tag = next(a.split("=", 1)[1] for a in args if a.startswith("--tag="))
        built[dockerfile] = tag
    assert built == {
        "containers/train.Dockerfile": image("train"),
        "containers/serve.Dockerfile": image("serve"),
    }
    assert build["images"] == [image("train"), image("serve")]


def test_the_version_tag_is_the_packages() -> None:
    assert cloudbuild()["substitutions"]["_VERSION"] == __version__


def test_the_default_build_is_what_configs_ask_for_by_default() -> None:
    """Built in the project that publishes them, the images are the configs' defaults."""
    values = {"PROJECT_ID": "llm-pipeline", **cloudbuild()["substitutions"]}

    pushed = [substitute(uri, values) for uri in cloudbuild()["images"]]

    vertex = VertexConfig()
    assert pushed == [vertex.image_uri("train"), vertex.image_uri("serve")]
    assert all(uri.startswith(DEFAULT_IMAGE_REPOSITORY + "/") for uri in pushed)


def test_make_images_submits_it_with_the_packages_version() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    done = subprocess.run(
        ["make", "--dry-run", "--no-print-directory", "images", "PROJECT=acme"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    command = " ".join(done.stdout.replace("\\\n", " ").split())
    assert "gcloud builds submit --config cloudbuild.yaml --project acme" in command
    assert f"_VERSION={__version__}" in command
