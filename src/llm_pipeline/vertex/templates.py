"""Push the compiled pipeline to an Artifact Registry KFP repository, as a template that
the Vertex Pipelines gallery runs, with `kfp.registry.RegistryClient`."""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_pipeline import __version__
from llm_pipeline.config import ConfigError
from llm_pipeline.errors import UserError

#: Artifact Registry: https://REGION-kfp.pkg.dev/PROJECT/REPOSITORY.
ARTIFACT_REGISTRY = re.compile(
    r"https://[a-z0-9-]+-kfp\.pkg\.dev/[a-z][a-z0-9-]{4,28}[a-z0-9]/[a-z][a-z0-9-]*"
)
#: Any other registry that speaks KFP's template protocol: https, or http on loopback only
#: (a template and its token must not cross a network in the clear).
OTHER_REGISTRY = re.compile(
    r"https://[^/\s]+/\S+|http://(?:127\.0\.0\.1|localhost)(?::[0-9]+)?/[^/\s]+/\S+"
)


def artifact_registry_location(host: str) -> tuple[str, str] | None:
    """(project, region) of an Artifact Registry KFP repository URL, else None."""
    match = re.fullmatch(r"https://([a-z0-9-]+)-kfp\.pkg\.dev/([^/]+)/[^/]+", host.rstrip("/"))
    return (match.group(2), match.group(1)) if match else None


@dataclass(frozen=True)
class Uploaded:
    """The template as Artifact Registry holds it."""

    package: str
    version: str  #: `sha256:...`, the digest to pin in schedules
    tags: tuple[str, ...]


def check_host(host: str) -> str:
    """`host` without a trailing slash, or ConfigError saying the shape it must have."""
    host = host.rstrip("/")
    if "kfp.pkg.dev" in host and not ARTIFACT_REGISTRY.fullmatch(host):
        raise ConfigError(
            [
                f"--upload-template {host!r} is not an Artifact Registry KFP repository URL: "
                "https://REGION-kfp.pkg.dev/PROJECT/REPOSITORY"
            ]
        )
    if not OTHER_REGISTRY.fullmatch(host):
        raise ConfigError(
            [
                f"--upload-template {host!r} is not an Artifact Registry KFP repository URL: "
                "https://REGION-kfp.pkg.dev/PROJECT/REPOSITORY (create one with `gcloud "
                "artifacts repositories create REPOSITORY --repository-format=kfp "
                "--location=REGION`)"
            ]
        )
    return host


def upload_template(host: str, spec: Path, *, auth: Any = None) -> Uploaded:
    """Upload `spec`, tagged with the package version and `latest`.

    `auth` is what RegistryClient sends (default: Google credentials for a kfp.pkg.dev host).
    """
    from kfp.registry import RegistryClient

    tags = (__version__, "latest")
    try:
        client = RegistryClient(host=host, auth=auth)
        package, version = client.upload_pipeline(file_name=str(spec), tags=list(tags))
    except Exception as exc:  # requests, google.auth: whatever stops the upload
        raise UserError(f"uploading the template to {host} failed: {exc}") from None
    return Uploaded(package=package, version=version, tags=tags)
