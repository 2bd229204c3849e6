"""`pipeline.py clean`: free the disk old local runs hold (local/cleanup.py says what goes),
and the lines a local run ends with about its disk and, when stopped, what it kept.

Exit codes: 0 done (or nothing to do), 2 the pipeline root does not exist.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from llm_pipeline.local import LocalRun
from llm_pipeline.local.cleanup import plan_cleanup, remove
from llm_pipeline.local.disk import checkpoint_root, format_size, last_checkpoint
from llm_pipeline.local.summary import format_stop, typed_command

#: A local run's default pipeline root (cli/run.py's DEFAULT_LOCAL_ROOT).
DEFAULT_ROOT = Path("runs")

EXAMPLES = """\
examples:
  python pipeline.py clean --dry-run
      list what would be removed from runs/ and how much it frees; remove nothing
  python pipeline.py clean
      remove old runs' data, models and checkpoints; keep the newest run whole, every
      run's report.html and pipeline.log, and the registry
  python pipeline.py clean --keep 0 --dry-run
      what removing the newest run's share too would free (--pipeline-root FOLDER: runs
      started with that --pipeline-root)
"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`clean`'s flags; every flag says what it does."""
    parser = commands.add_parser(
        "clean",
        help="Remove old local runs' data, models and checkpoints; keep reports and logs.",
        description="Free the disk old local runs hold: the download, preprocess and "
        "finetune steps' folders (data, model, checkpoints) of every run but the newest, and "
        "the temporary folders runs left. Kept: each run's report.html and pipeline.log, "
        "the evaluation's scores and predictions, and the registry's versions (`registry "
        "prune` deletes those no endpoint serves or can roll back to).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=clean)
    parser.add_argument(
        "--pipeline-root",
        type=Path,
        default=DEFAULT_ROOT,
        help=f"The local runs' folder (default: {DEFAULT_ROOT}/, as a run's --pipeline-root).",
    )
    parser.add_argument(
        "--keep",
        type=int,
        default=1,
        metavar="N",
        help="Newest runs left whole, to resume or look into (default: 1).",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="List what would be removed; remove nothing."
    )


def clean(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Plan, print and (unless a dry run) remove; returns the exit code."""
    root: Path = args.pipeline_root
    if args.keep < 0:
        parser.error(f"--keep: must be 0 or more, got {args.keep}")
    if not root.is_dir():
        print(f"error: --pipeline-root: {root} is not a folder", file=sys.stderr)
        return 2
    removals = plan_cleanup(root, keep=args.keep)
    for removal in removals:
        print(f"  {format_size(removal.size):>8}  {removal.path}  ({removal.why})")
    total = format_size(sum(removal.size for removal in removals))
    if not removals:
        print(f"Nothing to remove under {root.resolve()}.")
    elif args.dry_run:
        print(f"Would free {total} (dry run: nothing removed).")
    else:
        print(f"Freed {format_size(remove(removals))}.")
    return 0


def clean_command(pipeline_root: Path) -> str:
    """The `clean` command for runs under `pipeline_root`, as a person types it."""
    words = typed_command("clean")
    if pipeline_root != DEFAULT_ROOT:
        words += ["--pipeline-root", str(pipeline_root)]
    return shlex.join(words)


def stop_line(
    run: LocalRun, *, args: argparse.Namespace, pipeline_root: Path, checkpoint_dir: str | None
) -> str:
    """The line a stopped run ends with (`format_stop`): a run whose checkpoints are in its
    own folder resumes from them when the same command names that folder."""
    root = checkpoint_root(run.run_dir, checkpoint_dir) if run.run_dir else None
    checkpoint = last_checkpoint(root)
    resume = ""
    if checkpoint is not None and root is not None and not checkpoint_dir:
        words = typed_command("--config", str(args.config))
        for override in [*args.overrides, f"train.checkpoint_dir={root.resolve()}"]:
            words += ["--set", override]
        if pipeline_root != DEFAULT_ROOT:
            words += ["--pipeline-root", str(pipeline_root)]
        resume = shlex.join(words)
    cleanup = clean_command(pipeline_root)
    return format_stop(run, checkpoint=checkpoint, resume_command=resume, clean_command=cleanup)


def exit_code(run: LocalRun) -> int:
    """128 + the signal for a stopped run (130 Ctrl-C, 143 SIGTERM), as shells report it."""
    assert run.stopped_by is not None
    return 128 + run.stopped_by
