"""`--upload-template`: the compiled pipeline goes to a KFP template repository through
kfp's real `RegistryClient`, as a multipart upload with its tags, to the Artifact Registry
stand-in on loopback (`artifact_registry_standin.py`)."""

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from llm_pipeline import __version__, cli

from .artifact_registry_standin import ArtifactRegistryStandIn

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "small1vm1gpu.json")
#: The project whose Artifact Registry holds the images the template names (a loopback host
#: says none; an Artifact Registry URL does, see test_image_settings).
CONFIG_ARGS = ["--config", CONFIG, "--set", "vertex.project=test-project"]


@pytest.fixture
def kfp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of the test's own. RegistryClient reads ~/.config/kfp/registry_credentials.json
    and registry_context.json, through paths kfp fixes when first imported, so those are
    pointed here too."""
    from kfp.registry import registry_client

    config = tmp_path / ".config" / "kfp"
    monkeypatch.setenv("HOME", str(tmp_path))
    credentials = str(config / "registry_credentials.json")
    monkeypatch.setattr(registry_client, "LOCAL_REGISTRY_CREDENTIAL", credentials)
    monkeypatch.setattr(registry_client, "LOCAL_REGISTRY_CONTEXT", str(config / "context.json"))
    return config


@pytest.fixture
def registry(kfp_home: Path) -> Iterator[ArtifactRegistryStandIn]:
    with ArtifactRegistryStandIn("test-project", "pipelines") as standin:
        yield standin


def test_the_template_is_uploaded_with_the_version_and_latest_tags(
    registry: ArtifactRegistryStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*CONFIG_ARGS, "--upload-template", registry.host]) == 0
    (upload,) = registry.uploads
    assert upload.path == "/test-project/pipelines"
    assert upload.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert "authorization" not in upload.headers  # no credentials in this HOME
    assert upload.fields["tags"].decode() == f"{__version__},latest"
    spec = yaml.safe_load(upload.fields["content"])
    assert spec["pipelineInfo"]["name"] == "t5-small-cnndm"
    assert set(spec["root"]["inputDefinitions"]["parameters"]) >= {"epochs", "learning_rate"}
    assert upload.filename == "t5-small-cnndm.yaml"
    digest = hashlib.sha256(upload.fields["content"]).hexdigest()
    out = capsys.readouterr().out
    assert f"Uploaded the template t5-small-cnndm to {registry.host}" in out
    assert f"version: sha256:{digest}  (tags: {__version__}, latest)" in out
    assert f"pinned template: {registry.host}/t5-small-cnndm/sha256:{digest}" in out


def test_a_token_in_the_kfp_credentials_file_is_sent(
    registry: ArtifactRegistryStandIn, kfp_home: Path
) -> None:
    kfp_home.mkdir(parents=True)
    (kfp_home / "registry_credentials.json").write_text(json.dumps("t0ken"))
    assert cli.main([*CONFIG_ARGS, "--upload-template", registry.host]) == 0
    assert registry.uploads[0].headers["authorization"] == "Bearer t0ken"


@pytest.mark.parametrize(
    "host",
    [
        "us-central1-kfp.pkg.dev/proj/repo",
        "https://us-central1-kfp.pkg.dev/proj",
        "https://us-central1-kfp.pkg.dev/my-project",
        "http://registry.example.com/team/pipelines",  # a template over plain http
        "ftp://x/y",
    ],
)
def test_a_malformed_repository_url_is_refused_before_any_call(
    registry: ArtifactRegistryStandIn, capsys: pytest.CaptureFixture[str], host: str
) -> None:
    assert cli.main([*CONFIG_ARGS, "--upload-template", host]) == 2
    err = capsys.readouterr().err
    assert "https://REGION-kfp.pkg.dev/PROJECT/REPOSITORY" in err and "Traceback" not in err
    assert registry.uploads == []


def test_a_refused_upload_is_one_line(
    kfp_home: Path, loopback_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = f"http://127.0.0.1:{loopback_port}/test-project/pipelines"
    assert cli.main([*CONFIG_ARGS, "--upload-template", closed]) == 1
    err = capsys.readouterr().err
    assert f"uploading the template to {closed} failed" in err and "Traceback" not in err


def test_dry_run_uploads_nothing(
    registry: ArtifactRegistryStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*CONFIG_ARGS, "--upload-template", registry.host, "--dry-run"]) == 0
    assert "Would upload the template to" in capsys.readouterr().out
    assert registry.uploads == []


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (
            ["--service-account", "trainer@test-project.iam.gserviceaccount.com"],
            "leave out --service-account (the template's training jobs run as the "
            "vertex.service_account and on the vertex.network it is compiled with: give them "
            "with --set)",
        ),
        (["--wait", "--no-cache"], "leave out --no-cache, --wait\n"),
    ],
)
def test_run_flags_beside_an_upload_are_named(
    registry: ArtifactRegistryStandIn,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    problem: str,
) -> None:
    # It said "leave out the run flags", naming none.
    assert cli.main([*CONFIG_ARGS, "--upload-template", registry.host, *flags]) == 2
    assert f"--upload-template only uploads the spec: {problem}" in capsys.readouterr().err
    assert registry.uploads == []
