"""The nodes of a DeepSpeed-launched job meeting through their shared folder, with real keys
and a real sshd per node, on this machine: what a bucket's writer can and cannot do, and what
is left when the job ends. Both nodes run in threads; the launcher itself (`run`) is the one
seam, replaced by what the test checks while everything is up. The two-node training run is
tests/train/test_two_nodes_deepspeed.py.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.errors import TrainError
from llm_pipeline.launch import deepspeed_nodes
from llm_pipeline.launch.cluster import ClusterInfo
from llm_pipeline.launch.deepspeed_nodes import launch_with_deepspeed
from llm_pipeline.launch.node_files import NODE_DIR_ENV

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(deepspeed_nodes.SSHD).is_file() or os.getuid() != 0 or not shutil.which("ssh"),
        reason="starts sshd (openssh-server), as root",
    ),
]

TOKEN = "hf_planted_secret_123"
JOB = "job-1"


@dataclass(frozen=True)
class Job:
    """The smallest `RankJob`: what the ranks would run, as a file and its digest."""

    checkpoint_root: str
    work_dir: str

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"model": "tiny"}))

    def digest(self) -> str:
        return "d" * 64


@pytest.fixture
def home() -> Iterator[Path]:
    """A home for the nodes' ssh files inside this user's real one: sshd's StrictModes
    refuses keys below a world-writable folder such as /tmp."""
    real = Path(pwd.getpwuid(os.getuid()).pw_dir)
    folder = Path(tempfile.mkdtemp(prefix=".llm-pipeline-test-", dir=real))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deepspeed_nodes, "_POLL_S", 0.05)


class Node(threading.Thread):
    """One node's `launch_with_deepspeed`, in a thread; `error` is what it raised."""

    def __init__(self, rank: int, tmp: Path, home: Path, run: Callable[..., None]) -> None:
        super().__init__(daemon=True)
        self.info = ClusterInfo(
            node_rank=rank,
            node_count=2,
            master_addr="127.0.0.1",
            master_port=29500,
            procs_per_node=1,
            hosts=("127.0.0.1", "127.0.0.2"),
            source="vertex",
        )
        (tmp / f"work{rank}").mkdir()
        self.job = Job(checkpoint_root=str(tmp / "checkpoints"), work_dir=str(tmp / f"work{rank}"))
        self.env = {"CLOUD_ML_JOB_ID": JOB, "HF_TOKEN": TOKEN, "PATH": os.environ["PATH"]}
        self.port, self.home, self.run_launcher = _free_port(), home, run
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            launch_with_deepspeed(
                self.job,
                self.info,
                module="llm_pipeline.train.worker",
                env=self.env,
                run=self.run_launcher,
                ssh_port=self.port,
                home=self.home,
            )
        except BaseException as err:  # handed to the test
            self.error = err


def test_a_node_takes_one_nonce_and_serves_that_key_alone(tmp_path: Path, home: Path):
    """The test is the primary, and then a bucket's writer with a key of their own."""
    shared = tmp_path / "checkpoints" / f"ssh-{JOB}"
    node = Node(1, tmp_path, home, run=_never)
    node.start()
    hello = _wait_for(lambda: _read(shared / "hello-1.json"))
    ours, theirs = _keypair(tmp_path / "ours"), _keypair(tmp_path / "theirs")
    first = {"nonce": "1" * 32, "user_key": ours[1], "challenges": {"1": hello["challenge"]}}
    _write(shared / "ready.json", first)
    assert _wait_for(lambda: _read(shared / "ack-1.json")) == {"nonce": "1" * 32}
    # The node's sshd presents the host key it published, takes the key it was given, and
    # tells the session where the node's private folder is.
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{node.port} {hello['host_key']}\n")
    login = _ssh(ours[0], known, node.port, f'stat -c %a "${NODE_DIR_ENV}/secrets.json"')
    assert (login.returncode, login.stdout) == (0, "600\n"), login.stderr
    # A second ready.json, with another key and the same challenge: ignored, however long.
    second = {"nonce": "2" * 32, "user_key": theirs[1], "challenges": {"1": hello["challenge"]}}
    _write(shared / "ready.json", second)
    time.sleep(0.5)
    assert _read(shared / "ack-1.json") == {"nonce": "1" * 32}
    assert _ssh(theirs[0], known, node.port, "true").returncode == 255
    assert _ssh(ours[0], known, node.port, "true").returncode == 0
    # The job failed: the node says so, stops its sshd and removes all it wrote.
    _write(
        shared / "done.json", {"nonce": "1" * 32, "exit_code": 1, "challenges": first["challenges"]}
    )
    node.join(timeout=30)
    assert isinstance(node.error, TrainError) and "exit code 1" in str(node.error)
    assert sorted(p.name for p in shared.iterdir()) == ["done.json", "ready.json"]
    assert list((home / ".llm-pipeline-ssh").iterdir()) == []
    assert _ssh(ours[0], known, node.port, "true").returncode == 255


def test_a_ready_json_that_does_not_echo_the_nodes_challenge_is_not_taken(
    tmp_path: Path, home: Path
):
    """One left by an earlier attempt, or written by someone who guessed."""
    shared = tmp_path / "checkpoints" / f"ssh-{JOB}"
    node = Node(1, tmp_path, home, run=_never)
    node.start()
    hello = _wait_for(lambda: _read(shared / "hello-1.json"))
    ours = _keypair(tmp_path / "ours")
    _write(
        shared / "ready.json",
        {"nonce": "1" * 32, "user_key": ours[1], "challenges": {"1": "0" * 32}},
    )
    time.sleep(0.5)
    assert not (shared / "ack-1.json").exists()
    challenges = {"1": hello["challenge"]}
    _write(shared / "done.json", {"nonce": "1" * 32, "exit_code": 0, "challenges": challenges})
    node.join(timeout=30)
    assert isinstance(node.error, TrainError) and "before this node could join" in str(node.error)


@pytest.mark.parametrize("fails", [False, True], ids=["ends-well", "fails"])
def test_the_shared_folder_holds_no_secret_and_is_gone_however_the_job_ends(
    tmp_path: Path, home: Path, fails: bool
):
    shared = tmp_path / "checkpoints" / f"ssh-{JOB}"
    seen: dict[str, Any] = {}

    def launcher(command: list[str], *, spec: Job, info: ClusterInfo, env: dict[str, str]) -> None:
        """Runs while both nodes are up: what they put in the shared folder, and where."""
        seen["files"] = {p.name: p.read_bytes() for p in shared.iterdir()}
        seen["private"] = sorted(p.name for p in (home / ".llm-pipeline-ssh").glob("*/*"))
        seen["command"], seen["env"] = command, env
        seen["env_file"] = Path(env["DS_ENV_FILE"]).read_text()
        if fails:
            raise TrainError("rank 1 failed")

    primary = Node(0, tmp_path, home, run=launcher)
    worker = Node(1, tmp_path, home, run=_never)
    worker.start()
    primary.start()
    primary.join(timeout=60)
    worker.join(timeout=60)
    assert sorted(seen["files"]) == ["ack-1.json", "hello-1.json", "ready.json"]
    assert not [name for name, data in seen["files"].items() if b"PRIVATE KEY" in data]
    assert not [name for name, data in seen["files"].items() if TOKEN.encode() in data]
    # Each node's private keys, spec and secrets stayed in its own folder.
    assert seen["private"].count("secrets.json") == seen["private"].count("spec.json") == 2
    assert seen["private"].count("ssh_host_ed25519_key") == 2
    assert seen["private"].count("id_ed25519") == 1  # the primary's user key
    assert seen["command"][-2:] == ["--node-spec", "d" * 64]
    assert "HF_TOKEN" not in seen["env"] and TOKEN not in seen["env_file"]
    assert "PATH=" in seen["env_file"]
    if fails:
        assert isinstance(primary.error, TrainError) and "rank 1 failed" in str(primary.error)
        assert isinstance(worker.error, TrainError) and "exit code 1" in str(worker.error)
    else:
        assert (primary.error, worker.error) == (None, None)
    assert not shared.exists()
    assert list((home / ".llm-pipeline-ssh").iterdir()) == []
    assert not (home / ".ssh" / "config").exists()


def test_the_primary_removes_what_an_earlier_attempt_left(tmp_path: Path, home: Path):
    shared = tmp_path / "checkpoints" / f"ssh-{JOB}"
    shared.mkdir(parents=True)
    stale = {"nonce": "9" * 32, "user_key": "x", "challenges": {}}
    for name in ("ready.json", "done.json", "hello-1.json", "ack-1.json", "spec.json"):
        _write(shared / name, stale)
    seen: dict[str, list[str]] = {}

    def launcher(command: list[str], **_: object) -> None:
        seen["files"] = sorted(p.name for p in shared.iterdir())

    worker, primary = Node(1, tmp_path, home, run=_never), Node(0, tmp_path, home, run=launcher)
    primary.start()
    worker.start()
    primary.join(timeout=60)
    worker.join(timeout=60)
    assert (primary.error, worker.error) == (None, None)
    assert seen["files"] == ["ack-1.json", "hello-1.json", "ready.json"]
    assert not shared.exists()


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("only the primary runs the launcher")


def _keypair(path: Path) -> tuple[Path, str]:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path, path.with_suffix(".pub").read_text().strip()


def _ssh(key: Path, known_hosts: Path, port: int, command: str) -> subprocess.CompletedProcess[str]:
    options = [
        "-F", "/dev/null", "-i", str(key), "-p", str(port),
        "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
        "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
    ]  # fmt: skip
    return subprocess.run(
        ["ssh", *options, "root@127.0.0.1", command], capture_output=True, text=True, timeout=30
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        value: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return value


def _write(path: Path, payload: dict[str, Any]) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(payload))
    temp.replace(path)


def _wait_for(condition: Callable[[], Any], timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
