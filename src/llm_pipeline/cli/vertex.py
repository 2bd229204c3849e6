"""`pipeline.py run` on Vertex AI: submit (and watch), preflight, schedule, upload a template;
and `pipeline.py schedules list|pause|resume|delete`.

Every value is checked before the first call (exit 2 with the problem); a refusal from
Vertex AI is one line (exit 1); `--wait` exits 0 only when the run succeeded.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from llm_pipeline.config import ConfigError, PipelineConfig, VertexConfig, load_config
from llm_pipeline.config.preflight import (
    PREFLIGHT_SUFFIX,
    empties_its_endpoint,
    preflight_changes,
    preflight_config,
)
from llm_pipeline.config.run_parameters import parameter_defaults
from llm_pipeline.errors import UserError
from llm_pipeline.output_files import Step
from llm_pipeline.vertex import submit as vs
from llm_pipeline.vertex.schedules import validate_cron
from llm_pipeline.vertex.spec_summary import describe_spec
from llm_pipeline.vertex.target import located, vertex_location, vertex_target
from llm_pipeline.vertex.templates import artifact_registry_location, check_host, upload_template

SCHEDULE_ACTIONS = ("list", "pause", "resume", "delete")


def add_vertex_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that send the run to Vertex AI instead of running it here."""
    group = parser.add_argument_group(
        "Vertex AI (submit, schedule, template)",
        "With --project (or vertex.project) and a gs:// --pipeline-root the pipeline is "
        "compiled and submitted to Vertex AI Pipelines instead of running here.",
    )
    group.add_argument("--project", help="Google Cloud project id (default: vertex.project).")
    group.add_argument("--region", help="Vertex AI region (default: vertex.region).")
    group.add_argument("--service-account", help="Service account the run acts as.")
    group.add_argument("--network", help="VPC network to peer: projects/N/global/networks/NAME.")
    group.add_argument("--experiment", help="Vertex Experiment to log the run to.")
    group.add_argument(
        "--no-cache", action="store_true", help="Run every step; take nothing from the cache."
    )
    group.add_argument(
        "--wait", action="store_true", help="Print state changes until the run ends."
    )
    group.add_argument(
        "--poll-seconds",
        type=float,
        default=vs.POLL_SECONDS,
        help=f"How often --wait asks for the run's state (default {vs.POLL_SECONDS:g}).",
    )
    group.add_argument(
        "--preflight",
        action="store_true",
        help="Submit a preflight instead: the same pipeline, images and cluster shape at tiny "
        "sizes (a few dozen examples, two training steps and one checkpoint, a handful of "
        f"evaluation examples), deployed to <endpoint>{PREFLIGHT_SUFFIX} and undeployed when "
        "the run ends; follows the run to its end. Run it before the first real run.",
    )
    group.add_argument(
        "--no-deploy",
        action="store_true",
        help="With --preflight: stop after the gate; register and deploy nothing.",
    )
    group.add_argument(
        "--schedule",
        metavar="CRON",
        help='Create a schedule instead of one run, e.g. "TZ=Europe/Paris 0 3 * * 1".',
    )
    group.add_argument(
        "--max-concurrent-runs",
        type=int,
        help="Scheduled runs active at once (default 1: a due run waits for the last).",
    )
    group.add_argument("--start-time", help="First scheduled run no earlier than (RFC 3339).")
    group.add_argument("--end-time", help="No scheduled run after (RFC 3339).")
    group.add_argument(
        "--upload-template",
        metavar="URL",
        help="Push the compiled pipeline to an Artifact Registry KFP repository "
        "(https://REGION-kfp.pkg.dev/PROJECT/REPO), tagged with the version and latest.",
    )


#: Flags that mean something only on Vertex AI: any of them (or a gs:// root) asks for it.
VERTEX_FLAGS = ("project", "region", "service_account", "network", "experiment", "no_cache")
RUN_FLAGS = ("wait", "experiment")
SCHEDULE_FLAGS = ("start_time", "end_time", "max_concurrent_runs")
PREFLIGHT_FLAGS = ("preflight", "no_deploy")
ALL_FLAGS = (*VERTEX_FLAGS, *RUN_FLAGS, *SCHEDULE_FLAGS, *PREFLIGHT_FLAGS, "schedule")


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _given(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    return [_flag(name) for name in names if getattr(args, name) not in (None, False)]


def _submission_flags(args: argparse.Namespace) -> list[str]:
    """The flags, as the user typed them, that ask to submit or schedule on Vertex AI (a
    `gs://` pipeline root among them)."""
    root = str(args.pipeline_root or "")
    return _given(args, ALL_FLAGS) + (
        [f"--pipeline-root {root}"] if root.startswith("gs://") else []
    )


def wants_vertex(args: argparse.Namespace) -> bool:
    """Whether the command line asks for Vertex AI rather than a local run: a flag that
    would otherwise be ignored must not let a local run start silently."""
    return bool(_submission_flags(args))


def vertex_request(args: argparse.Namespace) -> list[str]:
    """What on the command line makes it a Vertex AI command (compile, upload, submit or
    schedule), as the user typed it; empty for a local run."""
    asked = ["--compile"] if args.compile is not None else []
    if args.upload_template:
        asked.append("--upload-template")
    return asked + _submission_flags(args)


def _conflicts(args: argparse.Namespace, config: PipelineConfig) -> list[str]:
    """Flags that cannot go together, said before anything is compiled."""
    problems = []
    if args.upload_template and (given := _submission_flags(args)):
        compiled_in = _given(args, ("service_account", "network"))
        problems.append(
            f"--upload-template only uploads the spec: leave out {', '.join(given)}"
            + (
                " (the template's training jobs run as the vertex.service_account and on the "
                "vertex.network it is compiled with: give them with --set)"
                if compiled_in
                else ""
            )
        )
    if args.schedule is None and (given := _given(args, SCHEDULE_FLAGS)):
        problems.append(f"{', '.join(given)} only apply with --schedule")
    if args.schedule is not None and (given := _given(args, (*RUN_FLAGS, "preflight"))):
        problems.append(f"{', '.join(given)} apply to one run, not to a --schedule")
    if args.schedule is not None and args.experiment is None and config.vertex.experiment:
        problems.append(
            f"the config's vertex.experiment {config.vertex.experiment!r} applies to one run, "
            "not to a --schedule (a schedule's runs are linked to no experiment): add --set "
            "vertex.experiment=null to schedule without it"
        )
    if args.no_deploy and not args.preflight:
        problems.append("--no-deploy only applies with --preflight")
    if not (math.isfinite(args.poll_seconds) and args.poll_seconds >= 0):
        problems.append(
            f"--poll-seconds must be a number of seconds, 0 or more, got {args.poll_seconds:g}"
        )
    root = str(args.pipeline_root or "")
    if root.startswith("gs://") and not _given(args, ALL_FLAGS) and not config.vertex.project:
        problems.append(
            f"--pipeline-root {root!r} is a Vertex AI root: add --project (or set "
            "vertex.project) to submit, or give a local folder for a local run"
        )
    return problems


#: The Vertex AI flags `--compile` takes: where the spec will run, which its images and
#: training folders are named for.
COMPILE_FLAGS = ("project", "region", "pipeline_root")


def compile_spec(args: argparse.Namespace, config: PipelineConfig) -> int:
    """Write the Vertex spec to `args.compile`, for the project, region and root the flags
    give (else the config's); the exit code."""
    from llm_pipeline.vertex.compile import spec_path_problem  # KFP: only the commands that build

    try:
        refused = _given(args, [name for name in ALL_FLAGS if name not in COMPILE_FLAGS])
        if args.upload_template:
            refused.append("--upload-template")
        if refused:
            raise ConfigError(
                [
                    f"--compile only writes the spec: leave out {', '.join(refused)} (it takes "
                    "--project, --region and --pipeline-root, for the images and folders "
                    "the spec names)"
                ],
                source="the command line",
            )
        if (problem := spec_path_problem(args.compile)) is not None:
            raise ConfigError([f"--compile {problem}"], source="the command line")
        where = located(
            config.vertex,
            project=args.project,
            region=args.region,
            pipeline_root=args.pipeline_root,
        )
        config = config.model_copy(update={"vertex": where})
        if problems := config.vertex.unresolved_image_problems():
            raise ConfigError(problems, source="the config")
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    from llm_pipeline.pipelines import build_pipeline  # KFP: only the commands that build
    from llm_pipeline.vertex.compile import compile_pipeline

    pipeline = build_pipeline(config, target="vertex")
    if args.dry_run:  # compiled where nothing of the user's is touched, and described
        with tempfile.TemporaryDirectory() as folder:
            _describe(config, compile_pipeline(pipeline, Path(folder) / args.compile.name))
        print(f"\nWould write the pipeline spec to {args.compile}")
        return 0
    path = compile_pipeline(pipeline, args.compile)
    print(f"Wrote the pipeline spec to {path}")
    return 0


def run_vertex(args: argparse.Namespace, config: PipelineConfig) -> int:
    """Submit, schedule or upload as the flags say; the exit code."""
    try:
        return _run_vertex(args, config)
    except UserError as exc:  # ConfigError included: a value that was checked; exit 2
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def _upload(args: argparse.Namespace, config: PipelineConfig) -> int:
    host = check_host(args.upload_template)
    # The template's images are in the project and region of its Artifact Registry repository,
    # unless the config names a project.
    if not config.vertex.project and (location := artifact_registry_location(host)):
        project, region = location
        located = config.vertex.model_copy(update={"project": project, "region": region})
        config = config.model_copy(update={"vertex": located})
    if problems := config.vertex.unresolved_image_problems():
        raise ConfigError(problems, source="the config")
    with tempfile.TemporaryDirectory() as folder:
        spec = vs.compile_for_vertex(config, Path(folder))
        if args.dry_run:
            _describe(config, spec)
            print(f"\nWould upload the template to {host} (tags: version, latest).")
            return 0
        uploaded = upload_template(host, spec)
    print(f"Uploaded the template {uploaded.package} to {host}")
    print(f"  version: {uploaded.version}  (tags: {', '.join(uploaded.tags)})")
    print(f"  pinned template: {host}/{uploaded.package}/{uploaded.version}")
    return 0


def _schedule_request(args: argparse.Namespace) -> tuple[vs.ScheduleRequest, list[str]]:
    problems: list[str] = []
    cron = args.schedule
    try:
        cron = validate_cron(args.schedule)
    except ConfigError as exc:
        problems += [f"--schedule {args.schedule!r}: {problem}" for problem in exc.problems]
    request = vs.ScheduleRequest(
        cron=cron,
        max_concurrent_runs=1 if args.max_concurrent_runs is None else args.max_concurrent_runs,
        start_time=args.start_time,
        end_time=args.end_time,
    )
    try:
        vs.check_times(request)
    except ConfigError as exc:
        problems += exc.problems
    return request, problems


def _run_vertex(args: argparse.Namespace, config: PipelineConfig) -> int:
    problems = _conflicts(args, config)
    if problems:
        raise ConfigError(problems, source="the command line")
    if args.upload_template:
        return _upload(args, config)
    real = config
    if args.preflight:  # its experiment, names and folders are its own from here on
        config = preflight_config(config, deploy=not args.no_deploy)
    target = request = None
    try:
        target = vertex_target(
            config.vertex,
            project=args.project,
            region=args.region,
            pipeline_root=args.pipeline_root,
            service_account=args.service_account,
            network=args.network,
            experiment=args.experiment,
        )
    except ConfigError as exc:
        problems += exc.problems
    if args.schedule is not None:
        request, schedule_problems = _schedule_request(args)
        problems += schedule_problems
    if problems or target is None:
        raise ConfigError(problems, source="the Vertex AI flags")
    # The images are named for the project and region the run goes to (`{project}`, `{region}`),
    # the training job's folders go under the root it goes to, and its custom jobs run as the
    # service account and on the network the run does, as they would had the config named them
    # (`pipelines.custom_jobs.custom_job_settings`).
    located = config.vertex.model_copy(
        update={
            "project": target.project,
            "region": target.region,
            "pipeline_root": target.pipeline_root,
            "service_account": target.service_account,
            "network": target.network,
        }
    )
    config = config.model_copy(update={"vertex": located})
    with tempfile.TemporaryDirectory() as folder:
        spec = vs.compile_for_vertex(
            config, Path(folder), scheduled=request is not None, preflight=args.preflight
        )
        if args.dry_run:
            _describe(config, spec)
            if args.preflight:
                print(f"Preflight of {real.name}, what differs from a real run:")
                for line in preflight_changes(real, config):
                    print(f"  {line}")
            where = f"{target.project}/{target.region}, root {target.pipeline_root}"
            what = f"schedule {request.cron!r}" if request else "one run"
            what = "a preflight run" if args.preflight else what
            print(f"\nWould submit {what} to Vertex AI ({where}); nothing was called.")
            return 0
        if request is not None:
            schedule = vs.create_schedule(config, target, spec, request, no_cache=args.no_cache)
            print(f"Created the schedule {schedule.display_name}: {schedule.resource_name}")
            print(f"  cron {request.cron!r}, at most {request.max_concurrent_runs} active run(s)")
            return 0
        submitted = vs.submit(config, target, spec, no_cache=args.no_cache)
    print(f"Submitted {submitted.resource_name}")
    print(f"  console: {submitted.console_url}")
    if target.experiment:
        print(f"  experiment: {target.experiment}")
    if not (args.wait or args.preflight):
        return 0
    succeeded = vs.watch(submitted.job, poll_s=args.poll_seconds)
    print("Pipeline succeeded." if succeeded else "Pipeline did not succeed.")
    if args.preflight:
        print(_preflight_verdict(real, config, succeeded))
    return 0 if succeeded else 1


def _preflight_verdict(real: PipelineConfig, preflight: PipelineConfig, succeeded: bool) -> str:
    """What a preflight's end means for the real run."""
    endpoint = preflight.deploy.endpoint_name()
    deploys = empties_its_endpoint(preflight)
    if succeeded:
        emptied = f" (its endpoint {endpoint} serves nothing again)" if deploys else ""
        return f"Preflight passed{emptied}: submit {real.name} without --preflight."
    cleanup = (
        f" Its last step, {Step.UNDEPLOY_PREFLIGHT.display_name}, empties {endpoint} however the "
        "others went; if that step is the one that failed, undeploy by hand (README: Clean up)."
    )
    return (
        "Preflight failed: the console shows the step that failed and its log; fix it before "
        "the real run." + (cleanup if deploys else "")
    )


def _describe(config: PipelineConfig, spec: Path) -> None:
    """The parameters and, per step, what the compiled spec runs where."""
    print("Parameters (defaults from the config; editable per run):")
    for name, value in parameter_defaults(config).items():
        print(f"  {name} = {value!r}")
    lines = describe_spec(yaml.safe_load(spec.read_text()))
    print(f"Steps of {spec.name} ({len(lines)}):")
    for line in lines:
        print(f"  {line}")


SCHEDULES_EXAMPLES = """\
examples:
  python pipeline.py schedules list --config configs/small1vm1gpu.json --project my-project
      list the schedules in the project, in the config's region
  python pipeline.py schedules list --project my-project --region us-central1
      the same without a config
  python pipeline.py schedules pause t5-small-cnndm --project my-project --region us-central1
      pause a schedule (by display name, id or resource name); `resume` starts it again
  python pipeline.py schedules delete t5-small-cnndm --project my-project --region us-central1
      delete it; the runs it made stay
(`pipeline.py run --help`: --schedule creates one)
"""


def add_schedules_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`pipeline.py schedules ACTION [NAME] (--config C | --project P --region R)`."""
    parser = commands.add_parser(
        "schedules",
        help="List, pause, resume or delete Vertex AI pipeline schedules.",
        description="Manage Vertex AI pipeline schedules: list, pause, resume, delete.",
        epilog=SCHEDULES_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=manage_schedules)
    parser.add_argument("action", choices=SCHEDULE_ACTIONS)
    parser.add_argument("name", nargs="?", help="Schedule id, resource name or display name.")
    parser.add_argument("--config", type=Path, help="Config whose vertex section says where.")
    parser.add_argument("--project", help="Google Cloud project id (default: vertex.project).")
    parser.add_argument("--region", help="Vertex AI region (default: vertex.region).")


def manage_schedules(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """List schedules, or pause, resume or delete one; returns the exit code."""
    if args.action != "list" and not args.name:
        parser.error(f"schedules {args.action} needs the schedule's name or id")
    try:
        vertex = load_config(args.config).config.vertex if args.config else VertexConfig()
        project, region = vertex_location(vertex, project=args.project, region=args.region)
        if args.action == "list":
            schedules = vs.list_schedules(project, region)
            for schedule in schedules:
                print(vs.schedule_line(schedule))
            if not schedules:
                print(f"No pipeline schedules in {project}/{region}.")
            return 0
        schedule = vs.find_schedule(project, region, args.name)
        with vs.calling(f"{args.action} {schedule.display_name}"):
            getattr(schedule, args.action)()
        past = {"pause": "Paused", "resume": "Resumed", "delete": "Deleted"}[args.action]
        print(f"{past} the schedule {schedule.display_name} ({schedule.resource_name}).")
        return 0
    except UserError as exc:  # ConfigError included: its exit code is 2
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
