"""`pipeline.py registry [prune] | rollback | serve`: look at and act on the model registry.

Locally the registry is `deploy.registry_dir` (from `--config`, else `runs/registry`, or
`--registry-dir`); with a config whose `deploy.target` is `vertex`, Vertex AI's. Each
command says which registry it read; a local folder that does not exist is refused (exit
2) before anything is read or written, so a mistyped folder is never taken for an empty
registry and a failed command leaves no folder or lock file behind.

`rollback` swaps an endpoint back to what it served before its last change, so a second
rollback undoes the first (@2 → @1 → @2), as `kubectl rollout undo` and `helm rollback`
do: a rollback run by mistake is undone by the same command, and both backends can do it
(a Vertex endpoint records one earlier version, not a history to walk back through).

`registry prune` deletes the model files of the local versions that no endpoint serves and
that are not among the last `--keep-served` it served, nor a model's newest, which a deploy
may have just registered (`registry/local/prune.py`); their records stay, marked pruned.
It is local only: Vertex AI's versions are not files here.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from llm_pipeline.config import ConfigError, DeployConfig, VertexConfig, load_config
from llm_pipeline.errors import UserError
from llm_pipeline.registry import EVALUATION_DATA_LABEL, ModelVersion, Registry, open_registry
from llm_pipeline.registry.base import ensure_files, utc_time
from llm_pipeline.registry.local.prune import DEFAULT_KEEP_SERVED, Verdict
from llm_pipeline.registry.local.registry import LocalRegistry
from llm_pipeline.serve.settings import env_name
from llm_pipeline.tasks import TASKS

#: Metrics shown per version in `registry`: every task's, its gate default first (a version
#: holds its own task's); every metric is kept in the registry.
LISTED_METRICS = tuple(dict.fromkeys(name for task in TASKS.values() for name in task.metric_names))

#: The endpoint that `make demo` (configs/local.json) deploys to, for the examples.
EXAMPLE_ENDPOINT = "docstrings-minilm-endpoint"
REGISTRY_EXAMPLES = """\
examples:
  python pipeline.py registry
      the local registry the shipped local configs use (runs/registry)
  python pipeline.py registry --config configs/local.json
      the registry a config deploys to (Vertex AI's for a config whose deploy.target is vertex)
  python pipeline.py registry --registry-dir runs/registry
      a local registry folder, named
  python pipeline.py registry prune --dry-run
      which versions' files `registry prune` would delete, and the space it would free
"""
PRUNE_EXAMPLES = """\
examples:
  python pipeline.py registry prune --dry-run
      what would be deleted from runs/registry, and how much it frees; nothing is deleted
  python pipeline.py registry prune
      delete them: keeps what each endpoint serves and the last 2 versions it served
  python pipeline.py registry prune --keep-served 5 --config configs/local.json
      keep the last 5 served versions, in the registry a config deploys to
"""
ROLLBACK_EXAMPLES = f"""\
examples:
  python pipeline.py rollback --config configs/local.json --endpoint {EXAMPLE_ENDPOINT}
      serve again the version the endpoint served before its last deploy
  python pipeline.py rollback --registry-dir runs/registry --endpoint {EXAMPLE_ENDPOINT}
      the same, the registry folder named; run twice, it serves again what it served at first
"""
SERVE_EXAMPLES = f"""\
examples:
  python pipeline.py serve --config configs/local.json --endpoint {EXAMPLE_ENDPOINT}
      serve, on http://127.0.0.1:8080 (page at /), what `make demo` deployed
  python pipeline.py serve --endpoint {EXAMPLE_ENDPOINT} --host 0.0.0.0 --port 9000
      on another address and port
(`python -m llm_pipeline.cli.serve --model FOLDER` serves a model folder, as the image does)
"""


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`registry` (and `registry prune`), `rollback` and `serve`, each with where the
    registry is."""
    where = _where_flags()

    def add(name: str, summary: str, description: str, examples: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(
            name,
            parents=[where],
            help=summary,
            description=description,
            epilog=examples,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.set_defaults(handler=registry_command)
        return parser

    listing = add(
        "registry",
        "List models, versions, metrics and endpoints; `registry prune` frees disk space.",
        "List every registered model's versions with their metrics, and what each endpoint "
        "serves. `registry prune` deletes the files of old local versions.",
        REGISTRY_EXAMPLES,
    )
    # The same flags after `prune`, left unset unless given there, so that they do not undo
    # what was given before it (`registry --registry-dir D prune`).
    where_after = _where_flags(unset=True)
    actions = listing.add_subparsers(dest="action", metavar="ACTION")
    prune = actions.add_parser(
        "prune",
        parents=[where_after],
        argument_default=argparse.SUPPRESS,
        help="Delete the files of local versions no endpoint serves or can roll back to.",
        description="Delete, from the local registry, the model files of every version that "
        "no endpoint serves now and that is not among the last --keep-served versions "
        "endpoints served before (always with each endpoint's `rollback` target, unless "
        "--keep-served is 0), never-served versions included. Each pruned version's record "
        "stays, marked pruned: `registry` lists it, `serve` and `rollback` refuse it. Local "
        "registries only.",
        epilog=PRUNE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prune.add_argument(
        "--keep-served",
        type=_count,
        default=DEFAULT_KEEP_SERVED,
        metavar="N",
        help=f"Previously served versions kept per model (default {DEFAULT_KEEP_SERVED}).",
    )
    prune.add_argument(
        "--dry-run",
        action="store_true",
        default=False,
        help="Say what would be deleted and the space freed; delete nothing.",
    )
    rollback = add(
        "rollback",
        "Swap an endpoint back to the version it served before.",
        "Move all of an endpoint's traffic back to the version it served before its last "
        "change. A rollback is a change too: it swaps with the previous version, so a second "
        "rollback undoes the first (@2 → @1 → @2), as `kubectl rollout undo` does.",
        ROLLBACK_EXAMPLES,
    )
    rollback.add_argument("--endpoint", required=True, help="Endpoint name.")
    serve = add(
        "serve",
        "Serve, on this machine, what a local endpoint serves.",
        "Run the prediction server, on this machine, for the version a local endpoint serves, "
        "with the settings it was registered with.",
        SERVE_EXAMPLES,
    )
    serve.add_argument("--endpoint", required=True, help="Endpoint name.")
    serve.add_argument("--host", default="127.0.0.1", help="Address to listen on.")
    serve.add_argument("--port", type=int, default=8080, help="Port (default 8080).")


def _where_flags(*, unset: bool = False) -> argparse.ArgumentParser:
    """`--config`, `--set`, `--registry-dir`; `unset`: absent from the namespace unless given."""
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS if unset else None,
        help="Config whose deploy section names the registry.",
    )
    where.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=argparse.SUPPRESS if unset else [],
        metavar="KEY=VALUE",
        help="Override a config value, as for a run.",
    )
    where.add_argument(
        "--registry-dir",
        type=Path,
        default=argparse.SUPPRESS if unset else None,
        help="Local registry folder (default: deploy.registry_dir).",
    )
    return where


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"a whole number, 0 or more, got {text!r}")
    return value


class LocalOnly(UserError):
    """A command for a local registry, given a Vertex target."""

    exit_code = 2


class NoRegistryFolder(UserError):
    """A local registry folder that does not exist: a mistyped path, or nothing deployed yet."""

    exit_code = 2  # the command line names it: a usage error


def _registry(args: argparse.Namespace) -> tuple[Registry, DeployConfig, str]:
    """The registry the command line names, its deploy section, and where it is, in words."""
    deploy, vertex = DeployConfig(), VertexConfig()
    named_by = "the default deploy.registry_dir"
    if args.config is not None:
        config = load_config(args.config, args.overrides).config
        deploy, vertex = config.deploy, config.vertex
        named_by = f"deploy.registry_dir of {args.config}"
    elif args.overrides:
        raise ConfigError(["--set needs --config"])
    if args.registry_dir is not None and deploy.target != "local":
        raise ConfigError(["--registry-dir is for a local registry; the config's target is vertex"])
    if deploy.target != "local" and getattr(args, "action", None) == "prune":
        raise LocalOnly(
            "registry prune is for a local registry only; the config's deploy.target is "
            "vertex, whose versions Vertex AI Model Registry keeps (delete one there with "
            "`gcloud ai models delete-version`)"
        )
    if deploy.target != "local":
        where = f"Vertex AI, project {vertex.project}, region {vertex.region}"
        return open_registry(deploy, vertex), deploy, where
    if args.registry_dir is not None:
        named_by = "--registry-dir"
    folder = Path(args.registry_dir or deploy.registry_dir).expanduser().absolute()
    if folder.exists() and not folder.is_dir():
        raise NoRegistryFolder(
            f"registry folder {folder} (from {named_by}) is a file, not a folder: name the "
            "folder a run deployed to with --registry-dir, or its config with --config"
        )
    if not folder.is_dir():
        raise NoRegistryFolder(
            f"no registry folder {folder} (from {named_by}): nothing was deployed there. "
            "Name the folder a run deployed to with --registry-dir, or its config with --config"
        )
    return open_registry(deploy, vertex, registry_dir=folder), deploy, str(folder)


def _metrics_text(version: ModelVersion) -> str:
    """The version's scores, in its task's order (the gate's metric first) when its serving
    environment names the task, else in LISTED_METRICS' order."""
    task = TASKS.get(version.serving_env.get(env_name("task"), ""))
    names = task.metric_names if task is not None else LISTED_METRICS
    shown = [f"{k} {version.metrics[k]:.2f}" for k in names if k in version.metrics]
    return ", ".join(shown) or "no metrics"


def list_registry(registry: Registry) -> None:
    """Print every model's versions and every endpoint's traffic split."""
    models = registry.models()
    served = registry.ever_served()
    if not models:
        print("No models registered yet.")
    for model in models:
        print(f"model {model}")
        versions = registry.versions(model)
        # Scores recorded on other rows or settings do not compare (the gate rescores the
        # served version instead): say which evaluation each was, where they differ.
        evaluations = {v.labels.get(EVALUATION_DATA_LABEL, "") for v in versions}
        for version in versions:
            made = f", run {version.run}" if version.run else ""
            if version.started_from:
                made += f", started from {version.started_from}"
            if served is not None and version.ref not in served:
                made += ", never served (its deploy did not finish)"
            if version.pruned:
                made += f", pruned {version.pruned[:10]} (files deleted, record kept)"
            elif version.files_missing:
                made += f", files missing (no {version.uri}: deleted by hand?)"
            if len(evaluations) > 1:
                made += f", evaluation {version.labels.get(EVALUATION_DATA_LABEL, 'unknown')[:8]}"
            created = utc_time(version.created)
            print(f"  {version.ref:<28} {created}  {_metrics_text(version)}{made}")
        if len(evaluations) > 1:
            print(
                "  (scored on different evaluation rows or settings: compare scores only "
                "between versions of the same evaluation)"
            )
    endpoints = registry.endpoints()
    if not endpoints:
        print("No endpoints yet.")
    for endpoint in endpoints:
        serving = endpoint.serving
        split = ", ".join(f"{d.version.ref} {d.traffic}%" for d in endpoint.deployed)
        now = serving.version.ref if serving else "nothing"
        print(f"endpoint {endpoint.name}: serves {now}" + (f" ({split})" if split else ""))


def _serve(registry: Registry, deploy: DeployConfig, args: argparse.Namespace) -> int:
    if deploy.target != "local":
        raise UserError(
            "serve runs a local endpoint's model on this machine; a Vertex endpoint is "
            "already served by Vertex AI (call it with its predict URL)"
        )
    served = registry.served_version(args.endpoint)
    if served is None:
        names = ", ".join(e.name for e in registry.endpoints()) or "none"
        raise UserError(f"endpoint {args.endpoint!r} serves nothing (endpoints: {names})")
    ensure_files(served, "serve")
    from llm_pipeline.cli.serve import main as serve_main
    from llm_pipeline.serve.settings import PREFIX

    # The record is a file in the registry folder, not trusted: only the server's own
    # settings (all `serving_env` writes) are taken from it, never LD_PRELOAD, PYTHONPATH,
    # a proxy or a CA bundle that this process and its children would obey.
    foreign = sorted(key for key in served.serving_env if not key.startswith(PREFIX))
    if foreign:
        raise UserError(
            f"{served.ref}'s record sets {', '.join(foreign)}, which are not the prediction "
            f"server's settings ({PREFIX}*); refused (the registry file was edited?)"
        )
    print(f"Serving {served.ref} ({served.uri}) for endpoint {args.endpoint}", flush=True)
    for key, value in served.serving_env.items():
        os.environ.setdefault(key, value)  # what the version was registered with
    argv = ["--model", served.uri, "--host", args.host, "--port", str(args.port)]
    return serve_main(argv)


def _rollback(registry: Registry, endpoint: str, *, local: bool) -> int:
    """Roll `endpoint` back and say what a second rollback would do: swap back, unless this
    one took a canary off (the version that kept serving beside it stays). A local endpoint
    is a record that `serve` reads when it starts: a server already running is not moved."""
    served = registry.served_version(endpoint)
    outcome = registry.rollback(endpoint)
    moved = f"rolled back from {outcome.moved_from.ref} to {outcome.moved_to.ref}"
    if served is not None and served.ref == outcome.moved_from.ref:
        again = f"rollback again swaps back to {outcome.moved_from.ref}"
    else:
        again = f"the canary {outcome.moved_from.ref} is off; rollback again has nothing to undo"
    print(f"endpoint {endpoint}: {moved} (now 100% of traffic); {again}")
    if local:
        print(
            f"A `serve` of {endpoint} started before this still serves "
            f"{outcome.moved_from.ref}: restart it to serve {outcome.moved_to.ref}."
        )
    return 0


def _prune(registry: Registry, *, keep_served: int, dry_run: bool) -> int:
    """Print what prune deletes (would delete) and the bytes freed; delete unless dry."""
    from llm_pipeline.local.disk import format_size

    assert isinstance(registry, LocalRegistry)  # `_registry` refused a Vertex target
    busy: tuple[Verdict, ...] = ()
    if dry_run:
        plan = registry.prune_plan(keep_served)
        sized = [(verdict, registry.files_size(verdict.version)) for verdict in plan.delete]
        unfinished = registry.unfinished_size(plan)
        verb = "would delete"
    else:
        outcome = registry.prune(keep_served)
        plan, sized, unfinished = outcome.plan, list(outcome.pruned), outcome.unfinished
        verb, busy = "deleted", outcome.busy
    for kept in plan.keep:
        print(f"keep {kept.version.ref}: {kept.reason}")
    for verdict, size in sized:
        print(f"{verb} {verdict.version.ref} ({verdict.reason}): {format_size(size)}")
    for verdict in busy:
        print(f"left {verdict.version.ref} alone: a deploy is checking it now")
    total = sum(size for _verdict, size in sized) + unfinished
    if dry_run:
        if unfinished:
            print(f"would finish an earlier, stopped prune: {format_size(unfinished)}")
        print(f"Would free {format_size(total)} (dry run: nothing deleted).")
        return 0
    if unfinished:
        print(f"finished an earlier, stopped prune: {format_size(unfinished)}")
    print(f"Freed {format_size(total)} in total; the pruned versions' records stay.")
    return 0


def registry_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `registry`, `rollback` or `serve`; returns the exit code (2 for a user's mistake)."""
    try:
        registry, deploy, where = _registry(args)
        print(f"Registry: {where}", flush=True)
        if args.command == "registry" and args.action == "prune":
            return _prune(registry, keep_served=args.keep_served, dry_run=args.dry_run)
        if args.command == "registry":
            list_registry(registry)
            return 0
        if args.command == "rollback":
            return _rollback(registry, args.endpoint, local=deploy.target == "local")
        return _serve(registry, deploy, args)
    except UserError as exc:  # ConfigError included: its exit code is 2
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
