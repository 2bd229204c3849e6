"""`pipeline.py` on Vertex AI: submit (and watch), schedule, upload a template, and
`pipeline.py schedules list|pause|resume|delete`.

Every value is checked before the first call (exit 2 with the problem); a refusal from
Vertex AI is one line (exit 1); `--wait` exits 0 only when the run succeeded.
"""

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from llm_pipeline.components import STEPS
from llm_pipeline.config import ConfigError, PipelineConfig, VertexConfig, load_config
from llm_pipeline.config.run_parameters import parameter_defaults
from llm_pipeline.errors import UserError
from llm_pipeline.runner import vertex_submit as vs
from llm_pipeline.runner.cron import validate_cron
from llm_pipeline.runner.templates import check_host, upload_template
from llm_pipeline.runner.vertex_target import vertex_target

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
        "--schedule",
        metavar="CRON",
        help='Create a schedule instead of one run, e.g. "TZ=Europe/Paris 0 3 * * 1".',
    )
    group.add_argument(
        "--max-concurrent-runs",
        type=int,
        default=1,
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


def wants_vertex(args: argparse.Namespace) -> bool:
    """Whether the command line asks for Vertex AI rather than a local run."""
    root = str(args.pipeline_root or "")
    flags = (args.project, args.wait, args.schedule, args.experiment, args.no_cache)
    return root.startswith("gs://") or any(flags)


def run_vertex(args: argparse.Namespace, config: PipelineConfig) -> int:
    """Submit, schedule or upload as the flags say; the exit code."""
    try:
        return _run_vertex(args, config)
    except UserError as exc:  # ConfigError included: a value that was checked
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1


def _run_vertex(args: argparse.Namespace, config: PipelineConfig) -> int:
    if args.upload_template:
        host = check_host(args.upload_template)
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
    # The local default root means "not given": then vertex.pipeline_root.
    given_root = args.pipeline_root if args.pipeline_root != str(DEFAULT_LOCAL_ROOT) else None
    problems: list[str] = []
    target = request = None
    try:
        target = vertex_target(
            config.vertex,
            project=args.project,
            region=args.region,
            pipeline_root=given_root,
            service_account=args.service_account,
            network=args.network,
            experiment=args.experiment,
        )
    except ConfigError as exc:
        problems += exc.problems
    if args.schedule is not None:
        cron = args.schedule
        try:
            cron = validate_cron(args.schedule)
        except ConfigError as exc:
            problems += exc.problems
        request = vs.ScheduleRequest(
            cron=cron,
            max_concurrent_runs=args.max_concurrent_runs,
            start_time=args.start_time,
            end_time=args.end_time,
        )
        try:
            vs.check_times(request)
        except ConfigError as exc:
            problems += exc.problems
    if problems or target is None:
        raise ConfigError(problems, source="the Vertex AI flags")
    with tempfile.TemporaryDirectory() as folder:
        spec = vs.compile_for_vertex(config, Path(folder), scheduled=request is not None)
        if args.dry_run:
            _describe(config, spec)
            where = f"{target.project}/{target.region}, root {target.pipeline_root}"
            what = f"schedule {request.cron!r}" if request else "one run"
            print(f"\nWould submit {what} to Vertex AI ({where}); nothing was called.")
            return 0
        if request is not None:
            schedule = vs.create_schedule(config, target, spec, request)
            print(f"Created the schedule {schedule.display_name}: {schedule.resource_name}")
            print(f"  cron {request.cron!r}, at most {request.max_concurrent_runs} active run(s)")
            return 0
        submitted = vs.submit(config, target, spec, no_cache=args.no_cache)
    print(f"Submitted {submitted.resource_name}")
    print(f"  console: {submitted.console_url}")
    if target.experiment:
        print(f"  experiment: {target.experiment}")
    if not args.wait:
        return 0
    succeeded = vs.watch(submitted.job, poll_s=args.poll_seconds)
    print("Pipeline succeeded." if succeeded else "Pipeline did not succeed.")
    return 0 if succeeded else 1


#: Local runs' default root; any other non-gs:// root with Vertex flags is a mistake.
DEFAULT_LOCAL_ROOT = Path("runs")


def _describe(config: PipelineConfig, spec: Path) -> None:
    """The parameters and, per step, what the compiled spec runs where."""
    print("Parameters (defaults from the config; editable per run):")
    for name, value in parameter_defaults(config).items():
        print(f"  {name} = {value!r}")
    compiled = yaml.safe_load(spec.read_text())
    tasks: dict[str, Any] = {}
    for name, task in compiled["root"]["dag"]["tasks"].items():
        if name.startswith("condition"):
            inner = compiled["components"][task["componentRef"]["name"]]["dag"]["tasks"]
            tasks.update({f"{n} (if the gate says yes)": t for n, t in inner.items()})
        else:
            tasks[name] = task
    order = [step.replace("_", "-") for step in STEPS]
    tasks = dict(sorted(tasks.items(), key=lambda item: order.index(item[0].split(" ")[0])))
    print(f"Steps of {spec.name} ({len(tasks)}):")
    for name, task in tasks.items():
        component = compiled["components"][task["componentRef"]["name"]]
        inputs = component.get("inputDefinitions", {}).get("parameters", {})
        pools = inputs.get("worker_pool_specs", {}).get("defaultValue")
        cached = "cached" if task.get("cachingOptions", {}).get("enableCache") else "not cached"
        retries = task.get("retryPolicy", {}).get("maxRetryCount")
        where = "pipeline task"
        if pools:
            machine = pools[0]["machine_spec"]
            gpus = (
                f" + {int(machine['accelerator_count'])} x {machine['accelerator_type']}"
                if machine.get("accelerator_type")
                else ""
            )
            nodes = sum(int(p["replica_count"]) for p in pools)
            where = f"custom job: {nodes} x {machine['machine_type']}{gpus}"
        extra = f", {retries} retries" if retries else ""
        print(f"  {name}: {where}, {cached}{extra}")


def schedules_main(argv: Sequence[str]) -> int:
    """`pipeline.py schedules ACTION [NAME] (--config C | --project P --region R)`."""
    parser = argparse.ArgumentParser(
        prog="pipeline.py schedules",
        description="Manage Vertex AI pipeline schedules: list, pause, resume, delete.",
    )
    parser.add_argument("action", choices=SCHEDULE_ACTIONS)
    parser.add_argument("name", nargs="?", help="Schedule id, resource name or display name.")
    parser.add_argument("--config", type=Path, help="Config whose vertex section says where.")
    parser.add_argument("--project", help="Google Cloud project id (default: vertex.project).")
    parser.add_argument("--region", help="Vertex AI region (default: vertex.region).")
    args = parser.parse_args(argv)
    if args.action != "list" and not args.name:
        parser.error(f"schedules {args.action} needs the schedule's name or id")
    try:
        vertex = load_config(args.config).config.vertex if args.config else VertexConfig()
        target = vertex_target(
            vertex, project=args.project, region=args.region, pipeline_root="gs://unused-root"
        )
        if args.action == "list":
            schedules = vs.list_schedules(target.project, target.region)
            for schedule in schedules:
                print(vs.schedule_line(schedule))
            if not schedules:
                print(f"No pipeline schedules in {target.project}/{target.region}.")
            return 0
        schedule = vs.find_schedule(target.project, target.region, args.name)
        with vs.calling(f"{args.action} {schedule.display_name}"):
            getattr(schedule, args.action)()
        past = {"pause": "Paused", "resume": "Resumed", "delete": "Deleted"}[args.action]
        print(f"{past} the schedule {schedule.display_name} ({schedule.resource_name}).")
        return 0
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
