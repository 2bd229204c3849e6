"""`pipeline.py run` (the default command): load the config, build the pipeline, then run it
here, compile it, or hand it to cli/vertex.py for Vertex AI.

Exit codes: 0 success, 1 a step failed, 2 the config or the command line is wrong; a local run
stopped by Ctrl-C exits 130, by SIGTERM 143 (cli/clean.py says what it kept).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from llm_pipeline.cli import clean, vertex
from llm_pipeline.config import ConfigError, LoadedConfig, PipelineConfig, load_config
from llm_pipeline.config.reference import config_reference_text
from llm_pipeline.fit.check import SKIP_FLAG, check_fit, enforce
from llm_pipeline.fit.places import Target
from llm_pipeline.fit.table import format_table
from llm_pipeline.local import LocalRun, run_local, step_order
from llm_pipeline.local.disk import kept_on_disk
from llm_pipeline.local.summary import HEADLINE, format_summary
from llm_pipeline.output_files import PREDICTIONS_FILE, Step
from llm_pipeline.tasks import DEFAULT_TASK, get_task

DEFAULT_LOCAL_ROOT = Path("runs")
#: Characters of a real document put in the summary's ready `curl` command.
EXAMPLE_CHARS = 200

EXAMPLES = """\
examples:
  python pipeline.py --config configs/local.json
      run the whole pipeline on this machine (KFP local runner, CPU, offline)
  python pipeline.py --config configs/local.json --set train.epochs=2 \\
      --set data.max_samples='{"train": 200}'
      override settings; values are parsed as JSON where they parse
  python pipeline.py --config configs/small1vm1gpu.json --compile small1vm1gpu.yaml \\
      --project my-project
      write the pipeline spec for the Vertex Pipelines UI, its images in my-project
  python pipeline.py --config configs/local.json --dry-run
      show the resolved config and the steps without running anything
  python pipeline.py --config configs/xxl2vm16gpu.json --check-fit
      estimate memory per GPU and host RAM for training, evaluation and serving
  python pipeline.py --config configs/small1vm1gpu.json --project my-project \\
      --region us-central1 --pipeline-root gs://my-bucket/runs --preflight
      first, a preflight: the same pipeline, images and cluster at tiny sizes, in minutes
  python pipeline.py --config configs/small1vm1gpu.json --project my-project \\
      --region us-central1 --pipeline-root gs://my-bucket/runs --wait
      submit to Vertex AI Pipelines and follow the run to its end
  python pipeline.py --config configs/small1vm1gpu.json --project my-project \\
      --pipeline-root gs://my-bucket/runs --schedule "TZ=Europe/Paris 0 3 * * 1"
      retrain every Monday at 03:00 Paris time (runs never overlap)
  python pipeline.py --config configs/small1vm1gpu.json \\
      --upload-template https://us-central1-kfp.pkg.dev/my-project/pipelines
      push the compiled pipeline to Artifact Registry for the template gallery
  python pipeline.py --help-config train
      the train section's keys with their types, defaults and descriptions
  python pipeline.py --help-config
      the top-level keys and the list of sections
(`run` may be left out: `pipeline.py --config C` is `pipeline.py run --config C`)
"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`run`'s flags; every flag says what it does."""
    parser = commands.add_parser(
        "run",
        help="Run the pipeline here, compile it, or submit it to Vertex AI (the default).",
        description="Build the pipeline from one JSON config and run it locally with KFP's "
        "local runner, write its spec for Vertex AI Pipelines, or submit it there.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=run_or_submit)
    parser.add_argument("--config", type=Path, help="JSON config file (see configs/README.md).")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a config value by its dotted path, e.g. train.epochs=3; repeatable. "
        "VALUE is parsed as JSON where it parses, else taken as a string.",
    )
    parser.add_argument(
        "--compile",
        type=Path,
        metavar="OUT.yaml",
        help="Write the pipeline spec (for the Vertex Pipelines UI) instead of running; "
        "--project, --region and a gs:// --pipeline-root (else the config's vertex section) "
        "name the images and folders it runs with.",
    )
    parser.add_argument(
        "--pipeline-root",
        help=f"Folder for a local run's outputs (default: {DEFAULT_LOCAL_ROOT}/); a gs:// "
        "folder submits the run to Vertex AI (default there: vertex.pipeline_root).",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Validate the config, print it resolved and the steps that would run; run nothing.",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="Print everything the steps print (KFP's executor inputs, every rank's logs) "
        "instead of one line per step and its status; the run's pipeline.log has it all anyway.",
    )
    parser.add_argument(
        "--check-fit",
        action="store_true",
        help="Estimate peak memory per GPU and host RAM for finetune, evaluate and serve "
        "against the machines the config names (this machine for a local config), print the "
        "table and exit: 0 if everything fits, 2 if not. Every run, compile and submit "
        "checks this first.",
    )
    parser.add_argument(
        SKIP_FLAG,
        action="store_true",
        help="Run, compile or submit even where the fit check says the config does not fit "
        "(for an estimate that is wrong for your setup).",
    )
    parser.add_argument(
        "--help-config",
        nargs="?",
        const="",
        metavar="SECTION",
        help="Print a config section's keys (train, data, ...) with their types, defaults and "
        "descriptions, then exit; with no SECTION, the top-level keys and the sections.",
    )
    vertex.add_vertex_arguments(parser)


def print_summary(
    run: LocalRun, config: PipelineConfig | None = None, pipeline_root: Path = DEFAULT_LOCAL_ROOT
) -> None:
    """Write the run report into the run's folder and print the summary that points at it."""
    # Here, not at the top: the report's page code loads ROUGE (nltk), a second at start-up
    # that --help, --dry-run and the Vertex commands do not need.
    from llm_pipeline.local.run_report import write_run_report

    report = write_run_report(run, title=config.name if config else "Pipeline run")
    registry, endpoint = None, None
    if config is not None and config.deploy.target == "local":
        registry = Path(config.deploy.registry_dir).expanduser()
        endpoint = config.deploy.endpoint_name()
    example = _example_instance(run, config)
    headline = config.deploy_policy.metric if config and config.deploy_policy.metric else None
    checkpoint_dir = config.train.checkpoint_dir if config else None
    kept = kept_on_disk(run.run_dir, checkpoint_dir) if run.run_dir else None
    print(
        format_summary(
            run,
            report=report,
            registry=registry,
            example=example,
            endpoint=endpoint,
            kept=kept,
            clean_command=clean.clean_command(pipeline_root),
            headline=headline or HEADLINE,
        )
    )


def _example_instance(run: LocalRun, config: PipelineConfig | None) -> Any:
    """The first evaluated input, shortened: something real to put in the curl command.
    Only where the server takes that input as evaluation read it (a task whose served
    instance is built otherwise, a chat from a rendered prompt, gets none)."""
    task = get_task(config.task if config else DEFAULT_TASK)
    evaluate = run.outcome(Step.EVALUATE)
    if evaluate is None or "predictions" not in evaluate.outputs:
        return None
    if task.serving_column != task.source_column:
        return None
    try:
        with (Path(evaluate.outputs["predictions"]) / PREDICTIONS_FILE).open() as lines:
            record = json.loads(next(lines))
            document = str(record[task.source_column])
    except (OSError, ValueError, KeyError, StopIteration):
        return None
    if len(document) > EXAMPLE_CHARS:
        document = document[:EXAMPLE_CHARS].rsplit(" ", 1)[0]
    # The task's instance of the whole row (a pair of texts keeps its second text).
    return task.serving_example_of({**record, task.source_column: document})


def _load(args: argparse.Namespace, parser: argparse.ArgumentParser) -> LoadedConfig:
    if args.config is None:
        parser.error("--config is required (e.g. --config configs/local.json)")
    loaded = load_config(args.config, args.overrides)
    for notice in loaded.notices:
        print(f"note: {notice}", file=sys.stderr)
    return loaded


def _fit_target(args: argparse.Namespace, config: PipelineConfig) -> Target:
    """Where the command runs the config: Vertex AI when it compiles or submits; for
    `--check-fit` alone, where the config is written to run (deploy.target)."""
    if vertex.vertex_request(args):
        return "vertex"
    if args.check_fit and config.deploy.target == "vertex":
        return "vertex"
    return "local"


def _check_fit(config: PipelineConfig, target: Target, *, show: bool, refuse: bool) -> None:
    """The fit check: its table on stdout with `show`, on stderr with a refusal; raises
    ConfigError for a config that does not fit (with `refuse`, else says so in notes)."""
    report = check_fit(config, target=target)
    if show:
        print(format_table(report))
    elif report.problems and refuse:
        print(format_table(report), file=sys.stderr)
    else:
        misfits = [f"does not fit: {row.problem}" for row in report.rows if row.problem]
        for line in [*report.skipped, *report.other_problems, *misfits]:
            print(f"note: fit check: {line}", file=sys.stderr)
    if refuse:
        enforce(report)


def _help_config(section: str) -> int:
    """`--help-config [SECTION]`, wrapped to the terminal (README has every section)."""
    width = min(shutil.get_terminal_size().columns, 100)
    try:
        print(config_reference_text(section or None, width), end="")
    except ValueError as exc:
        print(f"error: --help-config: {exc}", file=sys.stderr)
        return 2
    return 0


def run_or_submit(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run, compile or submit as the flags say; returns the exit code."""
    if args.help_config is not None:
        return _help_config(args.help_config)
    if args.check_fit and args.skip_fit_check:
        print(
            "error: --check-fit runs only the fit check and --skip-fit-check skips it: give one",
            file=sys.stderr,
        )
        return 2
    try:
        loaded = _load(args, parser)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config = loaded.config
    if (asked := vertex.vertex_request(args)) and config.deploy.target == "local":
        print(
            f"error: {', '.join(asked)} makes this a Vertex AI command, but {args.config} is "
            'written to run here (deploy.target "local"): give a config written for Vertex '
            f"AI (e.g. configs/small1vm1gpu.json), or leave out {', '.join(asked)}",
            file=sys.stderr,
        )
        return 2
    if args.check_fit or not args.skip_fit_check:
        target = _fit_target(args, config)
        # This machine's memory decides a local verdict: a dry run only reports it.
        refuse = args.check_fit or target == "vertex" or not args.dry_run
        try:
            _check_fit(config, target, show=args.check_fit, refuse=refuse)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.check_fit:
            return 0
    if args.compile is not None:
        return vertex.compile_spec(args, config)
    if args.upload_template or vertex.wants_vertex(args):
        return vertex.run_vertex(args, config)
    local_root = Path(args.pipeline_root or DEFAULT_LOCAL_ROOT)
    from llm_pipeline.pipelines import build_pipeline  # KFP: only the commands that build

    pipeline = build_pipeline(config, target="local")
    if args.dry_run:
        print(config.model_dump_json(indent=2))
        steps = step_order(pipeline)
        print(f"\nWould run locally under {local_root}/: {' → '.join(steps)}")
        return 0
    run = run_local(pipeline, pipeline_root=local_root, verbose=args.verbose)
    print_summary(run, config, local_root)
    if run.stopped_by is not None:
        checkpoints = config.train.checkpoint_dir
        print(clean.stop_line(run, args=args, pipeline_root=local_root, checkpoint_dir=checkpoints))
        return clean.exit_code(run)
    return 0 if run.succeeded else 1
