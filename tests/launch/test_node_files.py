"""A node's private folder: secrets by name, files only this user can write, the ranks' view."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from llm_pipeline.launch.node_files import (
    NODE_DIR_ENV,
    SECRETS_FILE,
    SPEC_FILE,
    is_secret,
    load_node_secrets,
    node_file,
    private_node_folder,
    write_secrets,
)

TOKEN = "hf_planted_secret_123"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("WANDB_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("MLFLOW_TRACKING_PASSWORD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("hf_token", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("HF_HUB_OFFLINE", False),
        ("PATH", False),
        ("KEYBOARD", False),
    ],
)
def test_a_secret_is_known_by_a_word_of_its_name(name: str, secret: bool):
    assert is_secret(name) is secret


def test_the_ranks_get_the_nodes_secrets_and_nothing_else(tmp_path: Path):
    with private_node_folder(tmp_path / "keys", prefix="node1-") as folder:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        names = write_secrets(folder, {"HF_TOKEN": TOKEN, "PATH": "/bin", "WANDB_API_KEY": "w"})
        assert names == ["HF_TOKEN", "WANDB_API_KEY"]
        secrets = folder / SECRETS_FILE
        assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
        assert json.loads(secrets.read_text()) == {"HF_TOKEN": TOKEN, "WANDB_API_KEY": "w"}
        # A rank started through the node's sshd: only NODE_DIR_ENV in its environment.
        environ = {NODE_DIR_ENV: str(folder), "PATH": "/usr/bin"}
        assert load_node_secrets(environ) == ["HF_TOKEN", "WANDB_API_KEY"]
        assert environ == {
            NODE_DIR_ENV: str(folder),
            "PATH": "/usr/bin",
            "HF_TOKEN": TOKEN,
            "WANDB_API_KEY": "w",
        }
    assert not folder.exists()  # removed with everything in it when the block ends
    assert load_node_secrets({}) == []  # torchrun's ranks inherit their environment instead


def test_a_file_others_could_change_is_not_the_nodes_own(tmp_path: Path):
    with private_node_folder(tmp_path, prefix="node0-") as folder:
        env = {NODE_DIR_ENV: str(folder)}
        (folder / SPEC_FILE).write_text("{}")
        (folder / SPEC_FILE).chmod(0o644)
        assert node_file(SPEC_FILE, env) == folder / SPEC_FILE
        (folder / SPEC_FILE).chmod(0o664)
        with pytest.raises(PermissionError, match=r"spec\.json: must belong to this user"):
            node_file(SPEC_FILE, env)
        write_secrets(folder, {"HF_TOKEN": TOKEN})
        (folder / SECRETS_FILE).chmod(0o644)
        with pytest.raises(PermissionError, match=r"secrets\.json: must belong to this user"):
            load_node_secrets(dict(env))
        folder.chmod(0o755)
        with pytest.raises(PermissionError, match=r"must belong to this user with mode 700"):
            node_file(SPEC_FILE, env)
        folder.chmod(0o700)
        link = tmp_path / "elsewhere"
        link.symlink_to(folder)
        with pytest.raises(PermissionError, match="a symbolic link"):
            node_file(SPEC_FILE, {NODE_DIR_ENV: str(link)})
    with pytest.raises(RuntimeError, match=f"{NODE_DIR_ENV} is not set"):
        node_file(SPEC_FILE, {})
    if os.getuid() == 0:  # root can give a file away: one of another user is refused too
        with private_node_folder(tmp_path, prefix="node0-") as folder:
            (folder / SPEC_FILE).write_text("{}")
            os.chown(folder / SPEC_FILE, 65534, 65534)
            with pytest.raises(PermissionError, match="owner 65534"):
                node_file(SPEC_FILE, {NODE_DIR_ENV: str(folder)})
