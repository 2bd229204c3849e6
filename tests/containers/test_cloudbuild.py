"""cloudbuild.yaml and `make images` push the three images at the package's version, where
the config's image settings look for them."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from llm_pipeline import __version__
from llm_pipeline.config import VertexConfig
from llm_pipeline.config.vertex import IMAGE_KINDS

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


def test_builds_each_dockerfile_and_pushes_each_image() -> None:
    build = cloudbuild()

    built = {}
    for step in build["steps"]:
        args = step["args"]
        assert args[0] == "build" and args[-1] == "."
        dockerfile = next(a.split("=", 1)[1] for a in args if a.startswith("--file="))
        tag = next(a.split("=", 1)[1] for a in args if a.startswith("--tag="))
        built[dockerfile] = tag
    assert built == {f"containers/{kind}.Dockerfile": image(kind) for kind in IMAGE_KINDS}
    assert build["images"] == [image(kind) for kind in IMAGE_KINDS]


def test_the_version_tag_is_the_packages() -> None:
    assert cloudbuild()["substitutions"]["_VERSION"] == __version__


def test_the_default_build_is_what_configs_ask_for_by_default() -> None:
    """Built in your project, the images are where a config running there looks: in that
    project, in Vertex AI's default region."""
    values = {"PROJECT_ID": "acme", **cloudbuild()["substitutions"]}

    pushed = [substitute(uri, values) for uri in cloudbuild()["images"]]

    vertex = VertexConfig(project="acme")
    assert pushed == [vertex.image_uri(kind) for kind in IMAGE_KINDS]
    assert pushed[0] == f"us-central1-docker.pkg.dev/acme/llm-pipeline/train:{__version__}"


def make_images(*args: str) -> dict[str, str]:
    """The substitutions `make images ARGS` submits cloudbuild.yaml with (a dry run)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        ["make", "--dry-run", "--no-print-directory", "images", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    command = " ".join(done.stdout.replace("\\\n", " ").split())
    (project,) = re.findall(
        r"gcloud builds submit --config cloudbuild.yaml --project (\S+)", command
    )
    (pairs,) = re.findall(r"--substitutions=(\S+)", command)
    return {"PROJECT_ID": project, **dict(pair.split("=", 1) for pair in pairs.split(","))}


@pytest.mark.parametrize("region", [None, "europe-west4"])
def test_make_images_pushes_where_a_config_in_that_project_and_region_looks(
    region: str | None,
) -> None:
    values = make_images("PROJECT=acme", *([f"REGION={region}"] if region else []))

    assert values["_VERSION"] == __version__
    pushed = [substitute(uri, values) for uri in cloudbuild()["images"]]
    vertex = VertexConfig(project="acme", **({"region": region} if region else {}))
    assert pushed == [vertex.image_uri(kind) for kind in IMAGE_KINDS]
