"""On the GPU machine: check the installed bundle, and run a config on the bundle's rows.

Both read the bundle's `manifest.json` (build.py writes it). They run after `run.sh` has
installed the wheels into the bundle's `site/` and put it first on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from llm_pipeline.bundle.build import MANIFEST
from llm_pipeline.errors import BundleError
from llm_pipeline.launch.lifetime import dies_with_this_process
from llm_pipeline.lockfile import installed_versions, unsatisfied_requirements

PROJECT = "llm-pipeline"


def read_manifest(bundle: Path) -> dict[str, Any]:
    path = bundle / MANIFEST
    if not path.is_file():
        raise BundleError(f"{bundle} is not a bundle: {MANIFEST} is missing")
    return dict(json.loads(path.read_text(encoding="utf-8")))


def problems(manifest: Mapping[str, Any], installed: Mapping[str, str]) -> list[str]:
    """What keeps this Python from running the bundle: a carried package that is not the one
    it sees first (the machine's own copy wins: PYTHONPATH is not set as run.sh sets it), or
    a requirement that neither the bundle nor the machine meets: the project's with the
    manifest's extras, and the serving packages the manifest lists (`requirements`)."""
    found = []
    for name, version in sorted(manifest["carried"].items()):
        seen = installed.get(name)
        if seen != version:
            found.append(
                f"{name}: the bundle carries {version}, Python sees "
                f"{seen or 'none'} first (is the bundle's site/ first on PYTHONPATH?)"
            )
    unmet = unsatisfied_requirements(PROJECT, manifest["extras"], installed)
    for line in manifest["requirements"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        version = installed.get(name)
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{PROJECT} requires {requirement}: {version or 'not'} installed")
        else:
            unmet += unsatisfied_requirements(name, requirement.extras, installed)
    for problem in sorted(set(unmet)):
        found.append(
            f"{problem} (the bundle leaves it to the machine: rebuild with it carried, "
            "`--carry NAME`, or install it here)"
        )
    return found


def check(bundle: Path) -> str:
    """One line on what runs here (Python, torch, its device); raises BundleError listing
    every problem `problems` finds."""
    manifest = read_manifest(bundle)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if python != manifest["python"]:
        raise BundleError(
            f"the bundle was built for Python {manifest['python']}, this is {python}: "
            f"rebuild it with --python {python}"
        )
    found = problems(manifest, installed_versions())
    if found:
        raise BundleError("the bundle cannot run here:\n  " + "\n  ".join(found))
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU: CPU only"
    return (
        f"bundle ok: Python {python}, torch {torch.__version__} ({device}), "
        f"{len(manifest['carried'])} packages carried, the machine's own: "
        f"{', '.join(manifest['machine_own'])}"
    )


def pipeline_command(
    bundle: Path, config: Path, extra: Sequence[str], python: str = sys.executable
) -> list[str]:
    """`pipeline.py --config CONFIG` with a built-in docstring dataset read from the rows the
    bundle carries (building it there would parse the machine's whole site-packages)."""
    manifest = read_manifest(bundle)
    try:
        dataset = json.loads(config.read_text(encoding="utf-8")).get("data", {}).get("dataset")
    except (OSError, ValueError, AttributeError) as exc:
        raise BundleError(f"{config}: not a readable JSON config ({exc})") from exc
    command = [python, "pipeline.py", "--config", str(config), *extra]
    carried = manifest["datasets"].get(dataset)
    if carried is not None:
        command += ["--set", f"data.dataset={(bundle / carried).resolve()}"]
    return command


def run_pipeline(bundle: Path, config: Path, extra: Sequence[str]) -> int:
    """Run `config` (relative to the bundle's project/) end to end; 0 with one line when the
    bundle has no such config. Raises BundleError where `bundle` is no bundle."""
    read_manifest(bundle)  # a mistyped bundle folder is no bundle, not a config it lacks
    project = bundle.resolve() / "project"  # the command runs there: a relative path would not
    if not (project / config).is_file():
        print(f"skipped: {config} is not in this bundle (build it from a checkout that has it)")
        return 0
    command = pipeline_command(bundle, project / config, extra)
    print("running:", " ".join(command[1:]), flush=True)
    # Killed with SIGKILL, this leaves no run going on (the GPU held) that nobody watches: the
    # run gets SIGTERM, and stops as after a Ctrl-C (its ranks save first).
    done = subprocess.run(
        command,
        cwd=project,
        env=dict(os.environ),
        check=False,
        preexec_fn=dies_with_this_process(),
    )
    return done.returncode
