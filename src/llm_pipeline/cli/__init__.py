"""Every command line of the project, and `pipeline.py`'s command tree (`main`).

`pipeline.py` takes a subcommand, `run` when none is named (`pipeline.py --config C` is
`pipeline.py run --config C`); each subcommand's module adds its parser with `add_parser`:

    run        cli/run.py       run locally, compile, submit to Vertex AI (cli/vertex.py)
    registry   cli/registry.py  list models, versions and endpoints
    rollback   cli/registry.py  serve again what an endpoint served before
    serve      cli/registry.py  serve what a local endpoint serves (cli/serve.py)
    schedules  cli/vertex.py    list, pause, resume or delete Vertex AI pipeline schedules
    clean      cli/clean.py     remove old local runs' data, models and checkpoints

The commands that images and `make` run are modules here too, run with `python -m`:
`cli/serve.py` (the serving image's server), `cli/container.py` (the train image's
entrypoint), `cli/image_check.py` (each image's last build step), `cli/docs.py` (`make docs`).
Nothing is imported at the top: `python -m llm_pipeline.cli.container` imports this package
first, and a command passed through the train image must not wait for the pipeline's imports.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

#: What `pipeline.py` runs when the first argument names no subcommand.
DEFAULT_COMMAND = "run"
HELP_FLAGS = ("-h", "--help")

EXAMPLES = """\
examples:
  python pipeline.py --config configs/local.json
      run the whole pipeline on this machine (the same as `pipeline.py run ...`)
  python pipeline.py run --help
      every flag of a run: overrides, dry run, fit check, compile, Vertex AI submission
  python pipeline.py registry --config configs/local.json
      list registered models, their versions and metrics, and what each endpoint serves
  python pipeline.py rollback --config configs/local.json --endpoint docstrings-minilm-endpoint
      serve again the version the endpoint served before its last deploy
  python pipeline.py serve --config configs/local.json --endpoint docstrings-minilm-endpoint
      run the prediction server for what a local endpoint serves (page at /)
  python pipeline.py schedules list --config configs/small1vm1gpu.json --project my-project
      list the Vertex AI pipeline schedules of a project
  python pipeline.py clean --dry-run
      what old local runs' data, models and checkpoints take, to remove with `clean`

commands the images and `make docs` run (python -m llm_pipeline.cli.NAME --help):
  serve        the prediction server of the serving images
  container    the train image's entrypoint
  image_check  every image's last build step
  docs         regenerate the README's tables and the YAML under components/ and pipelines/
"""


def build_parser() -> argparse.ArgumentParser:
    """`pipeline.py` with its subcommands, each with its own flags and examples."""
    from llm_pipeline.cli import clean, registry, run, vertex

    parser = argparse.ArgumentParser(
        prog="pipeline.py",
        description="Fine-tune and ship a language model with a Kubeflow pipeline built from "
        "one JSON config: configure → download → preprocess → finetune → evaluate → "
        "should-deploy → deploy. Runs locally with KFP's local runner, or compiles for Vertex "
        f"AI Pipelines; with no command, `{DEFAULT_COMMAND}`.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run.add_parser(commands)
    registry.add_parsers(commands)
    vertex.add_schedules_parser(commands)
    clean.add_parser(commands)
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's own parser, by name."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def with_command(argv: Sequence[str]) -> list[str]:
    """`argv` with `run` put first where it starts with a run's flag, or is empty: a first
    word that is not a subcommand stays, for argparse to refuse with the list of them."""
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in HELP_FLAGS):
        return [DEFAULT_COMMAND, *argv]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Run `pipeline.py`; returns the exit code (2 for a wrong config or command line)."""
    parser = build_parser()
    args = parser.parse_args(with_command(sys.argv[1:] if argv is None else argv))
    code: int = args.handler(args, subcommands(parser)[args.command])
    return code
