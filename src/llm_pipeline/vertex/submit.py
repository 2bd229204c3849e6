"""Submit the pipeline to Vertex AI Pipelines, watch it, and schedule it.

Thin over `google.cloud.aiplatform` (PipelineJob, PipelineJobSchedule): what is ours is the
compiled spec, the parameter values from the config, the checks before any call, and the
lines a person reads while a run goes on.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llm_pipeline.config import ConfigError, PipelineConfig
from llm_pipeline.config.run_parameters import parameter_defaults
from llm_pipeline.errors import UserError, first_line
from llm_pipeline.vertex.target import VertexTarget

Printer = Callable[[str], None]
#: How often `--wait` asks for the run's state.
POLL_SECONDS = 30.0
#: Final states, and whether they are a success.
FINAL_STATES = {
    "PIPELINE_STATE_SUCCEEDED": True,
    "PIPELINE_STATE_FAILED": False,
    "PIPELINE_STATE_CANCELLED": False,
}


class VertexCallError(UserError):
    """Vertex AI refused a request (permissions, quota, a bad value): its message."""


@dataclass(frozen=True)
class Submitted:
    """A run Vertex AI accepted."""

    resource_name: str
    job_id: str
    console_url: str
    job: Any  #: the aiplatform.PipelineJob


def compile_for_vertex(
    config: PipelineConfig, folder: Path, *, scheduled: bool = False, preflight: bool = False
) -> Path:
    """The Vertex spec of `config` (for a schedule: download never from the cache; for a
    preflight, `config` being its `preflight_config`: its endpoint emptied at the end)."""
    # Here, not at the top: building and compiling load KFP, which the CLI's other commands
    # (`registry`, `serve`), importing this module with the rest, do without.
    from llm_pipeline.pipelines import build_pipeline
    from llm_pipeline.vertex.compile import compile_pipeline

    pipeline = build_pipeline(config, target="vertex", scheduled=scheduled, preflight=preflight)
    return compile_pipeline(pipeline, folder / f"{config.name}.yaml")


def _job(config: PipelineConfig, target: VertexTarget, spec: Path, *, no_cache: bool) -> Any:
    from google.cloud import aiplatform

    return aiplatform.PipelineJob(
        display_name=config.name,
        template_path=str(spec),
        pipeline_root=target.pipeline_root,
        parameter_values=parameter_defaults(config),
        # None keeps each step's compiled choice (download and preprocess cached).
        enable_caching=False if no_cache else None,
        labels=dict(target.labels),
        project=target.project,
        location=target.region,
    )


@contextmanager
def calling(what: str) -> Iterator[None]:
    """Turn the API's refusal, or credentials missing or refused, into one line that says
    what was being done."""
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions

    try:
        yield
    except exceptions.GoogleAPICallError as exc:
        raise VertexCallError(f"{what}: Vertex AI answered {exc.message}") from None
    except auth_exceptions.DefaultCredentialsError as exc:
        raise VertexCallError(
            f"{what}: no usable Google Cloud credentials: run `gcloud auth application-default "
            f"login` or set GOOGLE_APPLICATION_CREDENTIALS ({first_line(exc)})"
        ) from None
    except auth_exceptions.GoogleAuthError as exc:
        raise VertexCallError(
            f"{what}: Google Cloud credentials were refused: {first_line(exc)}"
        ) from None


def submit(
    config: PipelineConfig, target: VertexTarget, spec: Path, *, no_cache: bool = False
) -> Submitted:
    """Submit one run of the compiled `spec` with the config's parameter values."""
    with calling("submitting the pipeline run"):
        job = _job(config, target, spec, no_cache=no_cache)
        try:
            job.submit(
                service_account=target.service_account,
                network=target.network,
                experiment=target.experiment,
            )
        except RuntimeError as exc:  # the SDK's way to say the experiment link failed
            raise VertexCallError(
                f"the run {job.resource_name} was submitted, but logging it to experiment "
                f"{target.experiment!r} failed: {exc}"
            ) from None
    job_id = job.resource_name.rsplit("/", 1)[-1]
    return Submitted(job.resource_name, job_id, target.console_url(job_id), job)


def watch(
    job: Any, *, out: Printer = print, poll_s: float = POLL_SECONDS, clock: Any = time
) -> bool:
    """Print each state change until the run ends; True when it succeeded."""
    last = None
    while True:
        with calling("reading the run's state"):
            state = job.state.name
        if state != last:
            print_time = datetime.now().strftime("%H:%M:%S")
            out(f"{print_time} {state.removeprefix('PIPELINE_STATE_').lower()}")
            last = state
        if state in FINAL_STATES:
            return FINAL_STATES[state]
        clock.sleep(poll_s)


@dataclass(frozen=True)
class ScheduleRequest:
    """What `--schedule` asks for; times are RFC 3339 (`2026-12-01T03:00:00Z`)."""

    cron: str
    max_concurrent_runs: int = 1
    start_time: str | None = None
    end_time: str | None = None


def check_times(request: ScheduleRequest) -> None:
    """ConfigError for a time that is not RFC 3339, or an end not after the start or now."""
    problems, parsed = [], {}
    for flag, value in (("--start-time", request.start_time), ("--end-time", request.end_time)):
        if value is None:
            continue
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            problems.append(f"{flag} {value!r} is not an RFC 3339 time (2026-12-01T03:00:00Z)")
            continue
        if moment.tzinfo is None:
            problems.append(f"{flag} {value!r} needs a UTC offset or Z (2026-12-01T03:00:00Z)")
            continue
        parsed[flag] = moment
    if len(parsed) == 2 and parsed["--end-time"] <= parsed["--start-time"]:
        problems.append("--end-time must be after --start-time")
    elif "--end-time" in parsed and parsed["--end-time"] <= datetime.now(UTC):
        problems.append(
            f"--end-time {request.end_time!r} is past: the schedule would never start a run"
        )
    if request.max_concurrent_runs < 1:
        problems.append(f"--max-concurrent-runs must be >= 1, got {request.max_concurrent_runs}")
    if problems:
        raise ConfigError(problems, source="the schedule")


def create_schedule(
    config: PipelineConfig,
    target: VertexTarget,
    spec: Path,
    request: ScheduleRequest,
    *,
    no_cache: bool = False,
) -> Any:
    """A Vertex pipeline schedule running `spec` on `request.cron`.

    Runs never overlap: `max_concurrent_run_count` only limits how many start at once, so
    `max_concurrent_active_run_count` limits how many are active, and a run that comes due
    while another is active waits in the queue (`allow_queueing`) instead of being skipped.
    The deploy step re-checks, just before traffic moves, that the endpoint still serves
    what its gate compared with.
    """
    with calling("creating the schedule"):
        job = _job(config, target, spec, no_cache=no_cache)
        return job.create_schedule(
            cron=request.cron,
            display_name=config.name,
            start_time=request.start_time,
            end_time=request.end_time,
            allow_queueing=True,
            max_concurrent_run_count=request.max_concurrent_runs,
            max_concurrent_active_run_count=request.max_concurrent_runs,
            service_account=target.service_account,
            network=target.network,
        )


def list_schedules(project: str, region: str) -> list[Any]:
    """The project's pipeline schedules in `region`, newest first."""
    from google.cloud import aiplatform

    with calling("listing schedules"):
        return list(
            aiplatform.PipelineJobSchedule.list(
                order_by="create_time desc", project=project, location=region
            )
        )


def find_schedule(project: str, region: str, name: str) -> Any:
    """The schedule `name` (its id, resource name or display name); UserError if none or
    several match, naming those there are."""
    schedules = list_schedules(project, region)
    matches = [
        s
        for s in schedules
        if name in (s.resource_name, s.resource_name.rsplit("/", 1)[-1], s.display_name)
    ]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(f"{s.display_name} ({s.resource_name.rsplit('/', 1)[-1]})" for s in schedules)
    if not matches:
        raise UserError(f"no schedule {name!r} in {project}/{region}; there are: {known or 'none'}")
    raise UserError(f"{len(matches)} schedules are called {name!r}: use the id ({known})")


def schedule_line(schedule: Any) -> str:
    """One line per schedule: display name, id, cron, state, next run."""
    resource = schedule.gca_resource
    next_run = resource.next_run_time.isoformat() if resource.next_run_time else "-"
    return (
        f"{schedule.display_name}  id={schedule.resource_name.rsplit('/', 1)[-1]}  "
        f"cron={resource.cron!r}  state={resource.state.name}  next={next_run}"
    )
