"""Where a Vertex AI run goes: project, region, pipeline root and who it runs as, checked
before any call, so a typo is one clear line and not a stack of API errors minutes later."""

import re
from dataclasses import dataclass, field

from llm_pipeline.config import ConfigError, VertexConfig

#: Google Cloud project ids: 6-30 characters, lowercase letters, digits and hyphens, from a
#: letter, not ending with a hyphen.
PROJECT_ID = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
#: Region names such as us-central1, europe-west4, northamerica-northeast1.
REGION = re.compile(r"[a-z]+(?:-[a-z]+)*[0-9]")
#: A gs:// folder: a bucket name (3-63 characters of [a-z0-9._-]) and an optional path.
GCS_FOLDER = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](?:/.*)?")
NETWORK = re.compile(r"projects/[^/]+/global/networks/[^/]+")
#: Vertex Experiment names.
EXPERIMENT = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")
SERVICE_ACCOUNT = re.compile(r"[^@\s]+@[^@\s]+\.iam\.gserviceaccount\.com|[^@\s]+@[^@\s]+")


@dataclass(frozen=True)
class VertexTarget:
    """A validated destination for `aiplatform`; build it with `vertex_target`."""

    project: str
    region: str
    pipeline_root: str
    service_account: str | None = None
    network: str | None = None
    experiment: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def console_url(self, job_id: str) -> str:
        """The run's page in the Google Cloud console."""
        return (
            f"https://console.cloud.google.com/vertex-ai/locations/{self.region}/pipelines/"
            f"runs/{job_id}?project={self.project}"
        )


#: Each checked setting: its pattern and the shape a person should give instead.
RULES = {
    "project": (PROJECT_ID, "6-30 lowercase letters, digits or hyphens, from a letter"),
    "region": (REGION, "a region such as us-central1"),
    "pipeline_root": (GCS_FOLDER, "a gs://bucket/folder URI"),
    "service_account": (SERVICE_ACCOUNT, "an email, NAME@PROJECT.iam.gserviceaccount.com"),
    "network": (NETWORK, "projects/PROJECT_NUMBER/global/networks/NAME"),
    "experiment": (EXPERIMENT, "lowercase letters, digits and hyphens (at most 128)"),
}


def _problems(chosen: dict[str, str | None], required: set[str]) -> list[str]:
    """Each missing required or malformed value, named by its flag and config key."""
    problems = []
    for name, value in chosen.items():
        flag = f"--{name.replace('_', '-')}"
        pattern, shape = RULES[name]
        if not value:
            if name in required:
                problems.append(f"{flag} (or vertex.{name}) is required on Vertex AI")
        elif not pattern.fullmatch(value):
            problems.append(f"{flag} {value!r} is not {shape} (or set vertex.{name})")
    return problems


def vertex_location(
    vertex: VertexConfig, *, project: str | None = None, region: str | None = None
) -> tuple[str, str]:
    """Project and region (flags, else the config), checked: where schedules are managed."""
    chosen = {"project": project or vertex.project, "region": region or vertex.region}
    problems = _problems(chosen, required=set(chosen))
    if problems:
        raise ConfigError(problems, source="the Vertex AI settings")
    return str(chosen["project"]), str(chosen["region"])


def located(
    vertex: VertexConfig,
    *,
    project: str | None = None,
    region: str | None = None,
    pipeline_root: str | None = None,
) -> VertexConfig:
    """`vertex` with the flags that were given put in, each checked, none required: where a
    compiled spec will run (its images are named for the project and region, its training
    folders go under the root)."""
    given = {"project": project, "region": region, "pipeline_root": pipeline_root}
    given = {name: value for name, value in given.items() if value}
    problems = _problems(given, required=set())
    if problems:
        raise ConfigError(problems, source="the Vertex AI settings")
    return vertex.model_copy(update=given)


def vertex_target(
    vertex: VertexConfig,
    *,
    project: str | None = None,
    region: str | None = None,
    pipeline_root: str | None = None,
    service_account: str | None = None,
    network: str | None = None,
    experiment: str | None = None,
) -> VertexTarget:
    """The flags, else the config's `vertex` section, checked. ConfigError lists each
    problem with the flag (and config key) it came from."""
    chosen = {
        "project": project or vertex.project,
        "region": region or vertex.region,
        "pipeline_root": pipeline_root or vertex.pipeline_root,
        "service_account": service_account or vertex.service_account,
        "network": network or vertex.network,
        "experiment": experiment or vertex.experiment,
    }
    problems = _problems(chosen, required={"project", "region", "pipeline_root"})
    if problems:
        raise ConfigError(problems, source="the Vertex AI settings")
    return VertexTarget(
        project=str(chosen["project"]),
        region=str(chosen["region"]),
        pipeline_root=str(chosen["pipeline_root"]).rstrip("/"),
        service_account=chosen["service_account"],
        network=chosen["network"],
        experiment=chosen["experiment"],
        labels=dict(vertex.labels),
    )
