"""A local-registry writer in a process of its own, for tests/registry/test_local.py.

    python local_writer.py register ROOT MODEL_DIR --count N --run PREFIX
    python local_writer.py deploy ROOT MODEL@VERSION ENDPOINT
    python local_writer.py prune ROOT --keep-served N

`--ready FILE --go FILE`: write FILE (ready), then wait for the other to exist, so two
writers start registering at the same moment. `--pause-at utime|rename|replace|unlink --paused
FILE`: the first call of that `os` function writes FILE and sleeps instead of returning,
so a test can SIGKILL the writer at a known point inside a write (the registry itself has
no such hook).
"""

import argparse
import os
import time
from pathlib import Path
from typing import Any

from llm_pipeline.registry.local.registry import LocalRegistry


def pause_inside(name: str, marker: Path) -> None:
    """Make `os.<name>` announce itself through `marker`, then hang until killed."""

    def hang(*args: Any, **kwargs: Any) -> None:
        marker.write_text(str(os.getpid()))
        time.sleep(600)
        raise SystemExit("not killed")

    setattr(os, name, hang)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["register", "deploy", "prune"])
    parser.add_argument("root")
    parser.add_argument("what", nargs="?", help="register: model folder; deploy: MODEL@VERSION")
    parser.add_argument("endpoint", nargs="?")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--run", default="writer")
    parser.add_argument("--keep-served", type=int, default=2)
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--go", type=Path)
    parser.add_argument("--pause-at", choices=["utime", "rename", "replace", "unlink"])
    parser.add_argument("--paused", type=Path)
    args = parser.parse_args()

    registry = LocalRegistry(args.root)
    if args.ready and args.go:
        args.ready.write_text("ready")
        while not args.go.exists():
            time.sleep(0.005)
    if args.pause_at:
        pause_inside(args.pause_at, args.paused)
    if args.action == "register":
        for index in range(args.count):
            registry.register(
                model="summarizer",
                model_dir=args.what,
                metrics={"index": index},
                run=f"{args.run}-{index}",
            )
    elif args.action == "prune":
        registry.prune(args.keep_served)
    else:
        model, version = args.what.split("@")
        registry.deploy(registry.version(model, version), args.endpoint)


if __name__ == "__main__":
    main()
