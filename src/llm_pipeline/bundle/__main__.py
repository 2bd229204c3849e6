"""`python -m llm_pipeline.bundle`: build the offline GPU bundle here, check and run it there.

    python -m llm_pipeline.bundle build OUT [--python 3.12] [--machine-has NAME] [--carry NAME]
        [--no-optional]
    python -m llm_pipeline.bundle check BUNDLE            (on the GPU machine, run.sh calls it)
    python -m llm_pipeline.bundle pipeline BUNDLE CONFIG [pipeline.py options]

Exit codes: 0 done, 1 a problem (one message, no traceback), 2 a wrong command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from llm_pipeline.bundle import build, machine, wheels
from llm_pipeline.errors import BundleError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llm_pipeline.bundle", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="build the bundle in a new folder OUT")
    make.add_argument("out", type=Path)
    make.add_argument("--checkout", type=Path, default=Path.cwd(), help="default: this folder")
    make.add_argument("--python", default="3.12", help="the GPU machine's Python (major.minor)")
    make.add_argument("--machine", default="x86_64", help="its CPU architecture")
    make.add_argument(
        "--machine-has",
        action="append",
        default=[],
        metavar="NAME",
        help=f"a package the machine has, left out (besides {', '.join(build.MACHINE_HAS)})",
    )
    make.add_argument(
        "--carry", action="append", default=[], metavar="NAME", help="carry one of those"
    )
    make.add_argument(
        "--no-optional",
        action="store_true",
        help="carry none of the optional wheels ("
        + ", ".join(pin.name for pin in build.OPTIONAL_WHEELS)
        + ")",
    )
    make.add_argument(
        "--rows",
        type=int,
        help="rows carried of each built-in dataset (default: all of them)",
    )
    make.add_argument(
        "--docstring-roots",
        type=Path,
        nargs="+",
        help="folders the rows are parsed from (default: the built-in datasets' own)",
    )
    make.add_argument("--max-mib", type=float, default=build.MAX_MIB)
    make.add_argument(
        "--wheel-cache",
        type=Path,
        help="where downloaded and built wheels are kept between builds "
        "(default: bundle-wheels/ in the project's cache folder, ~/.cache/llm-pipeline)",
    )
    check = commands.add_parser("check", help="check the installed bundle (run.sh runs it)")
    check.add_argument("bundle", type=Path)
    run = commands.add_parser("pipeline", help="run a config of the bundle on its rows")
    run.add_argument("bundle", type=Path)
    run.add_argument("config", type=Path, help="relative to the bundle's project/")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    if extra and args.command != "pipeline":
        build_parser().error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "build":
            has = set(build.canonical_names([*build.MACHINE_HAS, *args.machine_has]))
            options = build.BuildOptions(
                checkout=args.checkout,
                target=wheels.Target(python=args.python, machine=args.machine),
                machine_has=tuple(sorted(has - set(build.canonical_names(args.carry)))),
                rows=args.rows,
                docstring_roots=tuple(args.docstring_roots) if args.docstring_roots else None,
                max_mib=args.max_mib,
                optional=() if args.no_optional else build.OPTIONAL_WHEELS,
                **({"wheel_cache": args.wheel_cache} if args.wheel_cache else {}),
            )
            parts = build.build(args.out, options)
            size = build.folder_size(args.out)
            print(f"built {args.out}: {size / 2**20:.1f} MiB (limit {args.max_mib:g} MiB)")
            print("largest parts: " + "; ".join(map(str, parts[:8])))
            unread = machine.read_manifest(args.out)["unexpanded"]
            if unread:
                print(
                    "carried without their own requirements (not installed here at the lock's "
                    f"version; `make install`): {', '.join(unread)}"
                )
            print(f"on the GPU machine: copy {args.out} there and run {args.out.name}/run.sh")
            return 0
        if args.command == "check":
            print(machine.check(args.bundle))
            return 0
        return machine.run_pipeline(args.bundle, args.config, extra)
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
