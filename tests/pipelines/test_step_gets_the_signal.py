"""On Vertex the finetune step's Python is its container's main process, so the SIGTERM a
preempted VM sends reaches it (and through it torchrun and the ranks), instead of stopping
at a `sh` that ignores it as PID 1."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from llm_pipeline.config import load_config
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.vertex import compile_pipeline

REPO = Path(__file__).resolve().parents[2]
EXECUTOR = "-m kfp.dsl.executor_main"


def _finetune_script(tmp_path: Path) -> str:
    """The shell script every finetune replica runs, as compiled into the job's pools."""
    config = load_config(REPO / "configs" / "small2vm16gpu.json", ["vertex.project=acme"]).config
    spec = yaml.safe_load(
        compile_pipeline(build_pipeline(config, target="vertex"), tmp_path / "p.yaml").read_text()
    )
    finetune = spec["components"]["comp-finetune"]["inputDefinitions"]["parameters"]
    pools = finetune["worker_pool_specs"]["defaultValue"]
    commands = {tuple(pool["container_spec"]["command"][:3]) for pool in pools}
    assert len(commands) == 1, "every replica runs the same command"
    shell, flags, script = commands.pop()
    assert (shell, flags) == ("sh", "-ec")
    return script


def _pid_of_what_the_script_starts(script: str) -> tuple[int, int]:
    """Run `script` in dash as the container would, with the executor swapped for a line that
    prints its own pid; returns (the shell's pid, the pid that printed)."""
    probe = script.replace(EXECUTOR, "-c 'import os; print(os.getpid())'")
    assert probe != script
    shell = subprocess.Popen(
        ["sh", "-ec", probe, "component source"], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    out, _ = shell.communicate(timeout=60)
    assert shell.returncode == 0
    return shell.pid, int(out.strip())


@pytest.mark.skipif(shutil.which("python3") is None, reason="the script runs python3")
def test_the_finetune_step_replaces_the_shell(tmp_path: Path) -> None:
    script = _finetune_script(tmp_path)

    shell_pid, step_pid = _pid_of_what_the_script_starts(script)

    assert step_pid == shell_pid, "the step must be the process the container's signal reaches"


def test_kfps_own_script_would_leave_the_shell_in_front() -> None:
    """Why the rewrite exists: dash keeps running KFP's script with the step as its child."""
    kfp_script = (
        'program_path=$(mktemp -d)\nprintf "%s" "$0" > "$program_path/c.py"\n'
        f"_KFP_RUNTIME=true python3 {EXECUTOR}\n"
    )
    shell_pid, step_pid = _pid_of_what_the_script_starts(kfp_script)
    assert step_pid != shell_pid
