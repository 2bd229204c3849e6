"""Multi-node runs under DeepSpeed's own launcher: per-job SSH keys, sshd on every node.

DeepSpeed's launcher runs on the primary only and starts every rank over ssh, so each node
must run an sshd that accepts the job's key, and the primary must know each node's host key.
The nodes agree through a folder they all see as a local path (Vertex's /gcs/ mount):

1. the primary makes the job's keys there and writes `ready.json` with a fresh nonce;
2. every other node installs those keys, starts sshd and answers `ack-<node>.json` with the
   nonce (a stale folder from an earlier attempt carries an old nonce and is not trusted);
3. the primary writes the hostfile and runs `deepspeed --hostfile`; when it ends it writes
   `done.json` and the other nodes stop their sshd.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from llm_pipeline.errors import TrainError
from llm_pipeline.launch import ssh
from llm_pipeline.launch.cluster import ClusterInfo
from llm_pipeline.launch.commands import (
    DEFAULT_RDZV_TIMEOUT_S,
    deepspeed_command,
    deepspeed_env_file,
    deepspeed_hostfile,
)
from llm_pipeline.launch.lifetime import dies_with_this_process
from llm_pipeline.storage import is_remote, to_uri, write_atomic

SSHD = "/usr/sbin/sshd"
_POLL_S = 1.0

Runner = Callable[..., None]


class RankJob(Protocol):
    """What this module needs of the job the ranks run (training's `WorkerSpec` is one): a
    folder every node reaches, a local work folder, and a file to hand the ranks."""

    @property
    def checkpoint_root(self) -> str: ...

    @property
    def work_dir(self) -> str: ...

    def write(self, path: Path) -> None: ...


def launch_with_deepspeed(
    spec: RankJob, info: ClusterInfo, *, module: str, env: Mapping[str, str], run: Runner
) -> None:
    """This node's part in a DeepSpeed-launched job whose ranks run `python -m module --spec
    <file>`; returns when the job is over."""
    if not Path(SSHD).is_file():
        raise TrainError(
            "cluster.launcher 'deepspeed' needs sshd on every node (install openssh-server "
            "and pdsh in the training image), or use cluster.launcher 'torchrun'"
        )
    folder = _rendezvous_folder(spec, env)
    if info.is_primary:
        _primary(spec, info, folder, module=module, env=env, run=run)
    else:
        _worker_node(info, folder)


def _rendezvous_folder(spec: RankJob, env: Mapping[str, str]) -> Path:
    """A folder every node sees as a local path: under the checkpoint root, per job."""
    root = spec.checkpoint_root
    if is_remote(root):
        if not (root.startswith("gs://") and Path("/gcs").is_dir()):
            raise TrainError(
                f"cluster.launcher 'deepspeed': the nodes exchange ssh keys through the "
                f"checkpoint folder, which must be a path every node mounts; {root!r} is not "
                "(on Vertex, gs:// folders are mounted under /gcs/)"
            )
        root = "/gcs/" + root[len("gs://") :]
    job = env.get("CLOUD_ML_JOB_ID") or "job"
    return Path(to_uri(root)) / f"ssh-{job}"


def _primary(
    spec: RankJob,
    info: ClusterInfo,
    folder: Path,
    *,
    module: str,
    env: Mapping[str, str],
    run: Runner,
) -> None:
    shutil.rmtree(folder, ignore_errors=True)  # an earlier attempt's keys are never reused
    ssh.generate_job_keys(folder)
    nonce = uuid.uuid4().hex
    spec_path = folder / "spec.json"
    spec.write(spec_path)
    write_atomic(folder / "ready.json", json.dumps({"nonce": nonce}))
    sshd = _start_sshd(folder, info, nonce)
    code = 1
    try:
        _wait_for(
            lambda: all(
                _read_json(folder / f"ack-{node}.json").get("nonce") == nonce
                for node in range(1, info.node_count)
            ),
            what="every node's sshd",
        )
        work = Path(spec.work_dir)
        hostfile = work / "hostfile"
        hostfile.write_text(deepspeed_hostfile(info.hosts, slots=info.procs_per_node))
        env_file = work / ".deepspeed_env"
        env_file.write_text(deepspeed_env_file(env))
        command = deepspeed_command(
            info,
            hostfile=str(hostfile),
            script_args=["--spec", str(spec_path)],
            module=module,
        )
        run(command, spec=spec, info=info, env={**env, "DS_ENV_FILE": str(env_file)})
        code = 0
    finally:
        write_atomic(folder / "done.json", json.dumps({"nonce": nonce, "exit_code": code}))
        _stop(sshd)


def _worker_node(info: ClusterInfo, folder: Path) -> None:
    """Serve ssh for the primary's launcher until it says the job is done."""
    installed: str | None = None
    sshd: subprocess.Popen[bytes] | None = None
    deadline = time.monotonic() + DEFAULT_RDZV_TIMEOUT_S
    try:
        while True:
            nonce = _read_json(folder / "ready.json").get("nonce")
            done = _read_json(folder / "done.json")
            if installed and done.get("nonce") == installed:
                if done.get("exit_code") != 0:
                    raise TrainError(
                        f"the primary's DeepSpeed launcher failed (exit code "
                        f"{done.get('exit_code')}); its log has the failing rank's error"
                    )
                return
            if nonce and nonce != installed and ssh.job_keys_ready(folder):
                _stop(sshd)
                sshd = _start_sshd(folder, info, nonce)
                installed = nonce
                write_atomic(folder / f"ack-{info.node_rank}.json", json.dumps({"nonce": nonce}))
            if installed is None and time.monotonic() > deadline:
                raise TrainError(
                    f"no ssh keys from the primary in {folder} after "
                    f"{DEFAULT_RDZV_TIMEOUT_S} s; is node 0 running?"
                )
            time.sleep(_POLL_S)
    finally:
        _stop(sshd)


def _start_sshd(folder: Path, info: ClusterInfo, nonce: str) -> subprocess.Popen[bytes]:
    # ssh and pdsh read ~/.ssh/config from the home in the password database, not $HOME,
    # which images and schedulers often set elsewhere; sshd's StrictModes also wants the
    # keys under that home rather than under a world-writable folder such as /tmp.
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    local = home / ".llm-pipeline-ssh" / nonce[:12]
    files = ssh.prepare_node(
        folder, local, hosts=info.hosts, client_config=home / ".ssh" / "config"
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # Debian's sshd insists on it
    # Dies with this node's step, so a dead step leaves no sshd accepting the job's key.
    return subprocess.Popen(
        ssh.sshd_command(files.sshd_config, sshd=SSHD), preexec_fn=dies_with_this_process()
    )


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        process.wait(timeout=30)


def _wait_for(condition: Callable[[], bool], *, what: str) -> None:
    deadline = time.monotonic() + DEFAULT_RDZV_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TrainError(f"gave up waiting for {what} after {DEFAULT_RDZV_TIMEOUT_S} s")
        time.sleep(_POLL_S)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}
