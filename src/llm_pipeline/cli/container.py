"""The train image's ENTRYPOINT: run a given command unchanged, or train as a Vertex custom job.

    python -m llm_pipeline.cli.container COMMAND [ARGS...]
        Replaces itself with COMMAND (exec), so its exit code and signals are COMMAND's own.
        This keeps KFP's commands working (`python -m kfp.dsl.executor_main ...`,
        `sh -c ...`): Vertex and Kubernetes replace an image's ENTRYPOINT with them anyway,
        while Docker, and so KFP's local DockerRunner, pass them to it as arguments.
    python -m llm_pipeline.cli.container train --config CONFIG [--set KEY=VALUE ...]
        A standalone Vertex custom job, every replica running the same command: prepare the
        config's data (or take a tokenized `--dataset`), then fine-tune this replica's share
        of the cluster (`CLUSTER_SPEC`), checkpointing to `AIP_CHECKPOINT_DIR` and logging to
        `AIP_TENSORBOARD_LOG_DIR`; the primary writes the model to `AIP_MODEL_DIR`.

Exit codes of `train`: 0 done (a replica that writes nothing included), 1 a step failed,
2 the config or the command line is wrong, 75 stopped by SIGTERM (preempted; a restart
resumes from the checkpoint it saved). Imports stay inside functions so that a passed
command starts without waiting for torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llm_pipeline.config import PipelineConfig
    from llm_pipeline.train import FinetuneResult

TRAIN = "train"
_HELP = ("-h", "--help")


TRAIN_EXAMPLES = """\
examples:
  python -m llm_pipeline.cli.container train --config gs://my-bucket/small1vm1gpu.json
      the custom job's command: the config's data, then fine-tuning; the model to AIP_MODEL_DIR
  python -m llm_pipeline.cli.container train --config configs/local.json --model-dir model
      the same on this machine, the model to ./model
"""


def build_parser() -> argparse.ArgumentParser:
    """The `train` mode's command line; anything else is a command to run."""
    parser = argparse.ArgumentParser(
        prog="python -m llm_pipeline.cli.container",
        description="The train image's entrypoint. `train` fine-tunes as a Vertex AI custom "
        "job; any other arguments are a command, run unchanged (KFP's, a shell, deepspeed).",
    )
    modes = parser.add_subparsers(dest="mode", metavar="{train | COMMAND [ARGS...]}")
    train = modes.add_parser(
        TRAIN,
        help="Prepare the data and fine-tune on this replica; the primary writes the model.",
        description="Fine-tune as one replica of a Vertex AI custom job. Reads CLUSTER_SPEC "
        "(which node this is), AIP_CHECKPOINT_DIR (checkpoints; resumes from the newest), "
        "AIP_TENSORBOARD_LOG_DIR (event files) and AIP_MODEL_DIR (where the primary writes "
        "the model).",
        epilog=TRAIN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "--config", required=True, help="JSON config: a local path or gs://bucket/config.json."
    )
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a config value by its dotted path, e.g. train.epochs=3; repeatable.",
    )
    train.add_argument(
        "--dataset",
        metavar="URI",
        help="A tokenized dataset (the preprocess step's output) to train on instead of "
        "preparing the config's data.",
    )
    train.add_argument(
        "--model-dir",
        metavar="URI",
        help="Where the model goes (local or gs://); default: AIP_MODEL_DIR.",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch on the first argument; returns the exit code (a passed command never returns)."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not args:
        parser.print_usage(sys.stderr)
        return 2
    if args[0] == TRAIN or args[0] in _HELP:
        options = parser.parse_args(args)
        return train_command(options)
    if args[0].startswith("-"):
        parser.error(f"unknown option {args[0]}: give `train` or a command to run")
    return run_command(args)


def run_command(args: Sequence[str]) -> int:
    """Become `args` (exec, PATH searched); returns only when it cannot start (127, 126)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(args[0], list(args))
    except FileNotFoundError:
        print(f"error: {args[0]}: command not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"error: {args[0]}: not executable", file=sys.stderr)
        return 126
    raise AssertionError("unreachable: exec returned")  # pragma: no cover


def train_command(options: argparse.Namespace, env: Mapping[str, str] = os.environ) -> int:
    """`train`: load the config, check where the model goes, run the job, say what happened."""
    from llm_pipeline.config import ConfigError
    from llm_pipeline.errors import UserError

    model_dir = options.model_dir or env.get("AIP_MODEL_DIR", "").strip()
    if not model_dir:
        print(
            "error: no folder for the model: Vertex sets AIP_MODEL_DIR when the job has a "
            "base output directory; elsewhere pass --model-dir",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="llm-train-job-") as scratch:
        work = Path(scratch)
        try:
            config = _load(options.config, options.overrides, work)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            result = run_train_job(
                config, model_dir=model_dir, work=work, dataset=options.dataset, env=env
            )
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
    print(result.message, flush=True)
    if result.is_primary:
        print(f"model: {model_dir}\nmetrics: {json.dumps(result.metrics)}", flush=True)
    return 0


def run_train_job(
    config: PipelineConfig,
    *,
    model_dir: str,
    work: Path,
    dataset: str | None = None,
    env: Mapping[str, str] = os.environ,
) -> FinetuneResult:
    """This replica's part of a training job: data, fine-tuning, and (primary) the model.

    The trainer writes its model to a local folder whole (an object store has no atomic
    folder rename), so a `gs://` `model_dir` gets the finished folder copied up.
    """
    from llm_pipeline.storage import is_remote
    from llm_pipeline.train import run_finetune
    from llm_pipeline.train.checkpoints import upload

    dataset_dir = dataset or str(_prepare_data(config, work))
    local_model = str(work / "model") if is_remote(model_dir) else model_dir
    result = run_finetune(
        dataset_dir=dataset_dir,
        output_dir=local_model,
        model=config.model,
        train=config.train,
        cluster=config.cluster,
        env=env,
        task=config.task,
    )
    if result.is_primary and local_model != model_dir:
        upload(local_model, model_dir, shared_files=True)
    return result


def _prepare_data(config: PipelineConfig, work: Path) -> Path:
    """The download and preprocess steps, into `work`; every replica makes its own copy."""
    from llm_pipeline.data.download import download_dataset
    from llm_pipeline.data.preprocess import preprocess_dataset
    from llm_pipeline.tasks import builtin_datasets, get_task

    task = get_task(config.task)
    raw, tokenized = work / "dataset", work / "tokenized"
    download_dataset(config.data, task, raw, builtins=builtin_datasets())
    preprocess_dataset(
        dataset_dir=raw, output_dir=tokenized, data=config.data, model=config.model, task=task
    )
    return tokenized


def _load(path: str, overrides: Sequence[str], work: Path) -> PipelineConfig:
    """The validated config; a remote one is read from a local copy (relative paths inside
    it are then taken from that copy's folder, so give them as URLs)."""
    from llm_pipeline.config import ConfigError, load_config
    from llm_pipeline.storage import is_remote, local_copy

    source: str | Path = path
    if is_remote(path):
        try:
            source = local_copy(path, work / "config")
        except OSError as exc:
            raise ConfigError([f"config file {path!r} cannot be read: {exc}"]) from None
    loaded = load_config(source, overrides)
    for notice in loaded.notices:
        print(f"note: {notice}", file=sys.stderr)
    return loaded.config


if __name__ == "__main__":
    sys.exit(main())
