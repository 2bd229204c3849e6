"""Multi-node runs under DeepSpeed's own launcher: per-node ssh keys, sshd on every node.

DeepSpeed's launcher runs on the primary only and starts every rank over ssh (pdsh), so each
node runs an sshd that accepts the primary's user key, and the primary pins each node's host
key. Every node makes its own keys in a private folder on its own disk (`node_files`), with
its own copy of the run's spec and its secrets; only public keys, nonces and exit codes cross
the folder the nodes share (`exchange`):

1. every other node publishes a challenge and its host key (`hello-<node>.json`);
2. the primary answers with a nonce, its user key and the challenges (`ready.json`); a node
   takes the first answer that echoes its own challenge, and no other after it: it
   authorizes that key, starts sshd and says so (`ack-<node>.json`);
3. the primary runs `deepspeed --hostfile`; each node's sshd tells the ranks it starts where
   the node's private folder is, and a rank runs the spec there if its digest is the one on
   the primary's command line;
4. the primary writes `done.json`, the nodes stop their sshd and remove what they wrote, and
   the primary removes the folder, however the job ended.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from llm_pipeline.errors import TrainError
from llm_pipeline.launch import exchange, ssh
from llm_pipeline.launch.cluster import ClusterInfo
from llm_pipeline.launch.commands import (
    DEFAULT_RDZV_TIMEOUT_S,
    deepspeed_command,
    deepspeed_env_file,
    deepspeed_hostfile,
)
from llm_pipeline.launch.lifetime import dies_with_this_process
from llm_pipeline.launch.node_files import (
    NODE_DIR_ENV,
    SPEC_FILE,
    is_secret,
    private_node_folder,
    write_secrets,
)

SSHD = "/usr/sbin/sshd"
#: The flag that makes a rank read its node's own spec: `--node-spec <digest>`.
NODE_SPEC_FLAG = "--node-spec"
_POLL_S = 1.0
# How long a node's sshd may take to listen on its port once started.
_SSHD_START_S = 30.0
# How long the primary waits for the other nodes to stop their sshd before it removes the
# shared folder; a node that is slower finds the folder gone and stops at its next look.
_LEAVE_S = 30.0

Runner = Callable[..., None]
T = TypeVar("T")


class RankJob(Protocol):
    """What this module needs of the job the ranks run (training's `WorkerSpec` is one): a
    folder every node reaches, a local work folder, a file to hand the ranks and its digest."""

    @property
    def checkpoint_root(self) -> str: ...

    @property
    def work_dir(self) -> str: ...

    def write(self, path: Path) -> None: ...

    def digest(self) -> str: ...


@dataclass(frozen=True)
class _Node:
    info: ClusterInfo
    shared: Path
    files: ssh.SshFiles
    port: int


def launch_with_deepspeed(
    spec: RankJob,
    info: ClusterInfo,
    *,
    module: str,
    env: Mapping[str, str],
    run: Runner,
    ssh_port: int = ssh.DEFAULT_SSH_PORT,
    home: Path | None = None,
) -> None:
    """This node's part in a DeepSpeed-launched job whose ranks run `python -m module
    --node-spec <digest>`; returns when the job is over, and leaves nothing behind.

    `home`: where ssh reads its config (default: this user's home in the password database).
    """
    if not Path(SSHD).is_file():
        raise TrainError(
            "cluster.launcher 'deepspeed' needs sshd on every node (install openssh-server "
            "and pdsh in the training image), or use cluster.launcher 'torchrun'"
        )
    try:
        shared = exchange.exchange_folder(
            spec.checkpoint_root, job=env.get("CLOUD_ML_JOB_ID") or "job"
        )
    except ValueError as err:
        raise TrainError(f"cluster.launcher 'deepspeed': {err}") from err
    home = home or _ssh_home()
    prefix = f"node{info.node_rank}-"
    with private_node_folder(home / ".llm-pipeline-ssh", prefix=prefix) as local:
        spec.write(local / SPEC_FILE)
        (local / SPEC_FILE).chmod(0o600)  # whatever the umask: the ranks check
        write_secrets(local, env)
        files = ssh.node_files(local, client_config=home / ".ssh" / "config")
        node = _Node(info, shared, files, ssh_port)
        if info.is_primary:
            _primary(node, spec, module=module, env=env, run=run)
        else:
            _worker(node)


def _primary(
    node: _Node, spec: RankJob, *, module: str, env: Mapping[str, str], run: Runner
) -> None:
    info, shared, files = node.info, node.shared, node.files
    exchange.clear(shared)  # an earlier attempt's messages are never read
    nonce = secrets.token_hex(16)
    user_key = ssh.make_key(files.identity_file)
    host_key = ssh.make_key(files.host_key)
    ssh.authorize(files, user_key)
    sshd = _start_sshd(node)
    code = 1
    challenges: dict[str, str] = {}
    try:
        hellos = _wait_for(lambda: _hellos(shared, info, every=True), what="every node's host key")
        challenges = {str(n): challenge for n, (challenge, _) in hellos.items()}
        pinned = {info.hosts[n]: key for n, (_, key) in hellos.items()}
        ssh.trust_hosts(files, {info.hosts[0]: host_key, **pinned}, port=node.port)
        ssh.write_client_config(files, hosts=info.hosts, port=node.port)
        ready = {"nonce": nonce, "user_key": user_key, "challenges": challenges}
        exchange.write(shared, exchange.READY, ready)
        _wait_for(
            lambda: (
                all(
                    exchange.read(shared, exchange.ack_name(n)).get("nonce") == nonce
                    for n in range(1, info.node_count)
                )
                or None
            ),
            what="every node's sshd",
        )
        work = Path(spec.work_dir)
        hostfile = work / "hostfile"
        hostfile.write_text(deepspeed_hostfile(info.hosts, slots=info.procs_per_node))
        env_file = work / ".deepspeed_env"
        env_file.write_text(deepspeed_env_file(env))
        command = deepspeed_command(
            info, hostfile=str(hostfile), script_args=[NODE_SPEC_FLAG, spec.digest()], module=module
        )
        # Secrets stay out of the launcher's environment: the ranks read their node's file.
        runner_env = {name: value for name, value in env.items() if not is_secret(name)}
        run(command, spec=spec, info=info, env={**runner_env, "DS_ENV_FILE": str(env_file)})
        code = 0
    finally:
        seen = challenges or {str(n): c for n, (c, _) in _hellos(shared, info).items()}
        done = {"nonce": nonce, "exit_code": code, "challenges": seen}
        exchange.write(shared, exchange.DONE, done)
        _stop(sshd)
        ssh.remove_client_config(files)
        deadline = time.monotonic() + _LEAVE_S
        while exchange.leftovers(shared) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        exchange.clear(shared)


def _worker(node: _Node) -> None:
    """Serve ssh for the one primary that answered this node's challenge, until it is done."""
    info, shared, files = node.info, node.shared, node.files
    hello, ack = exchange.hello_name(info.node_rank), exchange.ack_name(info.node_rank)
    exchange.remove(shared, hello, ack)  # this node's messages from an earlier attempt
    challenge = secrets.token_hex(16)
    message = {"challenge": challenge, "host_key": ssh.make_key(files.host_key)}
    taken: str | None = None
    ignored: set[str] = set()
    sshd: subprocess.Popen[bytes] | None = None
    deadline = time.monotonic() + DEFAULT_RDZV_TIMEOUT_S
    try:
        while True:
            if _is_done(exchange.read(shared, exchange.DONE), info, challenge, taken):
                return
            ready = exchange.read(shared, exchange.READY)
            nonce = exchange.token(ready.get("nonce"))
            user_key = _user_key(ready)
            if taken is None and _echoes(ready, info, challenge) and nonce and user_key:
                ssh.authorize(files, user_key)
                sshd = _start_sshd(node)
                taken = nonce
                exchange.write(shared, ack, {"nonce": nonce})
            elif taken is None:
                # Again whenever missing: the primary's clean-up at its start removes it.
                with contextlib.suppress(FileNotFoundError):  # (and maybe the folder, meanwhile)
                    if not (shared / hello).is_file():
                        exchange.write(shared, hello, message)
                if time.monotonic() > deadline:
                    raise TrainError(
                        f"no answer from the primary in {shared} after "
                        f"{DEFAULT_RDZV_TIMEOUT_S} s; is node 0 running?"
                    )
            elif not ready:
                raise TrainError(
                    f"{shared / exchange.READY} is gone before the primary said the job is "
                    "done: the primary ended or restarted; see its log"
                )
            elif nonce and nonce != taken and nonce not in ignored:
                ignored.add(nonce)
                print(
                    f"node {info.node_rank}: ignoring a new nonce in {shared / exchange.READY}; "
                    "this node took one for this job and installs no other key",
                    flush=True,
                )
            time.sleep(_POLL_S)
    finally:
        _stop(sshd)
        exchange.remove(shared, hello, ack)


def _hellos(shared: Path, info: ClusterInfo, *, every: bool = False) -> dict[int, tuple[str, str]]:
    """Each other node's challenge and host key, as far as they are there and well formed;
    with `every`, {} until all are."""
    found = {}
    for n in range(1, info.node_count):
        message = exchange.read(shared, exchange.hello_name(n))
        challenge = exchange.token(message.get("challenge"))
        try:
            key = ssh.public_key(message.get("host_key"), what=f"node {n}'s host key")
        except ValueError:
            continue
        if challenge:
            found[n] = (challenge, key)
    return found if not every or len(found) == info.node_count - 1 else {}


def _user_key(ready: Mapping[str, object]) -> str | None:
    try:
        return ssh.public_key(ready.get("user_key"), what="the primary's user key")
    except ValueError:
        return None  # not an answer this node takes


def _echoes(message: Mapping[str, object], info: ClusterInfo, challenge: str) -> bool:
    echoed = message.get("challenges")
    return isinstance(echoed, dict) and echoed.get(str(info.node_rank)) == challenge


def _is_done(
    done: Mapping[str, object], info: ClusterInfo, challenge: str, taken: str | None
) -> bool:
    """Whether the primary this node answered has ended; raises if the job failed."""
    if not _echoes(done, info, challenge) or (taken and done.get("nonce") != taken):
        return False
    if done.get("exit_code") != 0:
        raise TrainError(
            f"the primary's DeepSpeed launcher failed (exit code {done.get('exit_code')}); "
            "its log has the failing rank's error"
        )
    if taken is None:
        raise TrainError("the primary ended the job before this node could join it")
    return True


def _start_sshd(node: _Node) -> subprocess.Popen[bytes]:
    """This node's sshd, listening; it tells each session where the node's private folder
    is."""
    files = node.files
    ssh.write_sshd_config(files, port=node.port, session_env={NODE_DIR_ENV: str(files.folder)})
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # Debian's sshd insists on it
    # Dies with this node's step, so a dead step leaves no sshd accepting the job's key.
    process = subprocess.Popen(
        ssh.sshd_command(files.sshd_config, sshd=SSHD), preexec_fn=dies_with_this_process()
    )
    try:
        ssh.wait_listening(process, node.port, timeout_s=_SSHD_START_S)
    except BaseException:
        _stop(process)
        raise
    return process


def _ssh_home() -> Path:
    # ssh and pdsh read ~/.ssh/config from the home in the password database, not $HOME,
    # which images and schedulers often set elsewhere; sshd's StrictModes also wants the
    # keys under that home rather than under a world-writable folder such as /tmp.
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        process.wait(timeout=30)


def _wait_for(condition: Callable[[], T | None], *, what: str) -> T:
    deadline = time.monotonic() + DEFAULT_RDZV_TIMEOUT_S
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TrainError(f"gave up waiting for {what} after {DEFAULT_RDZV_TIMEOUT_S} s")
        time.sleep(_POLL_S)
    return value
