"""`pipeline.py`: parse arguments, load the config, build the pipeline, run or compile it.

Exit codes: 0 success, 1 a step failed, 2 the config or the command line is wrong.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from llm_pipeline import registry_cli, vertex_cli
from llm_pipeline.config import ConfigError, LoadedConfig, load_config
from llm_pipeline.config.reference import config_reference_markdown
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.runner import LocalRun, compile_pipeline, run_local, step_order

DEFAULT_LOCAL_ROOT = Path("runs")
#: Metrics printed per step in the run summary; all of them are in the step's metrics file.
SHOWN_METRICS = 8
#: Output values longer than this are named, not printed.
LONGEST_SHOWN = 300

EXAMPLES = """\
examples:
  python pipeline.py --config configs/local.json
      run the whole pipeline on this machine (KFP local runner, CPU, offline)
  python pipeline.py --config configs/local.json --set train.epochs=2 \\
      --set data.max_samples='{"train": 200}'
      override settings; values are parsed as JSON where they parse
  python pipeline.py --config configs/small1vm1gpu.json --compile small1vm1gpu.yaml
      write the pipeline spec for the Vertex Pipelines UI
  python pipeline.py --config configs/local.json --dry-run
      show the resolved config and the steps without running anything
  python pipeline.py --config configs/small1vm1gpu.json --project my-project \
      --region us-central1 --pipeline-root gs://my-bucket/runs --wait
      submit to Vertex AI Pipelines and follow the run to its end
  python pipeline.py --config configs/small1vm1gpu.json --project my-project \
      --pipeline-root gs://my-bucket/runs --schedule "TZ=Europe/Paris 0 3 * * 1"
      retrain every Monday at 03:00 Paris time (runs never overlap)
  python pipeline.py schedules list --project my-project --region us-central1
      list schedules (also: pause|resume|delete NAME)
  python pipeline.py --config configs/small1vm1gpu.json \
      --upload-template https://us-central1-kfp.pkg.dev/my-project/pipelines
      push the compiled pipeline to Artifact Registry for the template gallery
  python pipeline.py registry
      list registered models, their versions and metrics, and what each endpoint serves
  python pipeline.py rollback --endpoint dialogsum-minilm-endpoint
      serve again the version the endpoint served before its last deploy
  python pipeline.py serve --endpoint dialogsum-minilm-endpoint [--port 8080]
      run the prediction server for what a local endpoint serves (page at /)
"""


def build_parser() -> argparse.ArgumentParser:
    """The command line; every flag says what it does."""
    parser = argparse.ArgumentParser(
        prog="pipeline.py",
        description="Fine-tune and ship a language model with a Kubeflow pipeline built from "
        "one JSON config: download → preprocess → finetune → evaluate → should-deploy → "
        "deploy. Runs locally with KFP's local runner, or compiles for Vertex AI Pipelines.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        help="Write the pipeline spec (for the Vertex Pipelines UI) instead of running.",
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
        "--quiet", action="store_true", help="Hide KFP's per-step log dump of executor inputs."
    )
    parser.add_argument(
        "--help-config",
        action="store_true",
        help="Print every config key with its type, default and description, then exit.",
    )
    vertex_cli.add_vertex_arguments(parser)
    return parser


def _is_structured(value: str) -> bool:
    """JSON objects and lists (configure's sections and worker pools), or anything long:
    settings to look up in the step's folder, not lines to read in a summary."""
    return len(value) > LONGEST_SHOWN or value.lstrip("'\"").startswith(("{", "["))


def print_summary(run: LocalRun) -> None:
    """Each step's outcome, outputs and values, the gate's decision and what was shipped."""
    print()
    print(f"Run folder: {run.run_dir}" if run.run_dir else "Run folder: (none was created)")
    marks = {"succeeded": "ok  ", "failed": "FAIL", "not run": "skip"}
    steps = {step.name: step for step in run.steps}
    for step in run.steps:
        print(f"  [{marks[step.status]}] {step.name}")
        long = [name for name, value in step.outputs.items() if _is_structured(value)]
        for name, where in step.outputs.items():
            if name not in long:
                print(f"           {name}: {where}")
        if long:
            print(f"           ({', '.join(long)}: in the step's folder)")
        if step.metrics:
            items = sorted(step.metrics.items())
            shown = ", ".join(f"{key}={value:g}" for key, value in items[:SHOWN_METRICS])
            more = len(items) - SHOWN_METRICS
            print(f"           values: {shown}" + (f" (+{more} more)" if more > 0 else ""))
        if step.error:
            print(f"           {step.error}")
    gate, shipped = steps.get("should-deploy"), steps.get("deploy")
    if gate is not None and gate.status == "succeeded":
        decision = "deploy" if gate.outputs.get("Output") == "True" else "do not deploy"
        print(f"Gate: {decision}: {gate.outputs.get('reason', '')}")
    if shipped is not None and shipped.status == "succeeded":
        endpoint = shipped.outputs.get("endpoint", "")
        print(f"Deployed {shipped.outputs.get('version', '')} to endpoint {endpoint}.")
        print(f"Serve it: python pipeline.py serve --endpoint {endpoint}")
    print("Pipeline succeeded." if run.succeeded else "Pipeline failed.")


def _load(args: argparse.Namespace, parser: argparse.ArgumentParser) -> LoadedConfig:
    if args.config is None:
        parser.error("--config is required (e.g. --config configs/local.json)")
    loaded = load_config(args.config, args.overrides)
    for notice in loaded.notices:
        print(f"note: {notice}", file=sys.stderr)
    return loaded


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in registry_cli.COMMANDS:
        return registry_cli.main(argv)
    if argv and argv[0] == "schedules":
        return vertex_cli.schedules_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.help_config:
        print(config_reference_markdown())
        return 0
    try:
        loaded = _load(args, parser)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config = loaded.config
    if args.upload_template or vertex_cli.wants_vertex(args):
        return vertex_cli.run_vertex(args, config)
    local_root = Path(args.pipeline_root or DEFAULT_LOCAL_ROOT)
    if args.compile is not None:
        path = compile_pipeline(build_pipeline(config, target="vertex"), args.compile)
        print(f"Wrote the pipeline spec to {path}")
        return 0
    pipeline = build_pipeline(config, target="local")
    if args.dry_run:
        print(config.model_dump_json(indent=2))
        steps = step_order(pipeline)
        print(f"\nWould run locally under {local_root}/: {' → '.join(steps)}")
        return 0
    run = run_local(pipeline, pipeline_root=local_root, quiet=args.quiet)
    print_summary(run)
    return 0 if run.succeeded else 1
