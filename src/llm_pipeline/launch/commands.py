"""Command lines that start the training processes on one node: torchrun, or DeepSpeed's launcher.

Pure builders: they return argument lists and file contents and run nothing, so what a replica
would start can be checked whole, and printed for `--dry-run`.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence

from llm_pipeline.launch.cluster import ClusterInfo
from llm_pipeline.launch.node_files import is_secret

# Static rendezvous waits this long for every node to join. Vertex starts replicas
# independently and a GPU node may spend minutes pulling the training image, so torch's
# 600 s default is short.
DEFAULT_RDZV_TIMEOUT_S = 1800

# What DeepSpeed's launcher carries to the other nodes (`.deepspeed_env`): an allowlist,
# since its pdsh runner pastes each variable into its command line as `export KEY=VALUE;`
# and logs that line. An ssh session starts with a near-empty environment, so without these a
# remote rank would lose PATH, the Vertex AIP_* locations, Hugging Face's offline switches
# and caches, and the NCCL and gloo settings (NCCL_/GLOO_SOCKET_IFNAME). Never a secret
# (`node_files.is_secret`), whatever its prefix: the ranks read those from their own node.
# Not CLUSTER_SPEC: the ranks get theirs from the launcher, and its JSON quotes cannot pass.
FORWARDED_ENV_NAMES = frozenset(
    {
        "GOOGLE_CLOUD_PROJECT",
        "HF_DATASETS_CACHE",
        "HF_DATASETS_OFFLINE",
        "HF_ENDPOINT",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_DISABLE_TELEMETRY",
        "HF_HUB_OFFLINE",
        "LD_LIBRARY_PATH",
        "PATH",
        "TOKENIZERS_PARALLELISM",
        "TRANSFORMERS_CACHE",
        "TRANSFORMERS_OFFLINE",
    }
)
FORWARDED_ENV_PREFIXES = ("AIP_", "CLOUD_ML_", "CUDA_", "GCSFS_", "GLOO_", "NCCL_", "TORCH_")
# What DeepSpeed's `export KEY="VALUE"` would not carry unchanged.
_UNSAFE_IN_EXPORT = frozenset('\n\r"$`\\')


def torchrun_command(
    cluster: ClusterInfo,
    *,
    script_args: Sequence[str],
    module: str | None = None,
    script: str | None = None,
    max_restarts: int = 0,
    rdzv_timeout_s: int = DEFAULT_RDZV_TIMEOUT_S,
) -> list[str]:
    """The `torchrun` argv that starts this node's share of the processes.

    One node: `--standalone` (a local rendezvous on a free port). Several: static rendezvous at
    the primary's fixed address, which is what Vertex's stable replica hostnames allow; it
    needs no etcd and no c10d endpoint. `sys.executable -m torch.distributed.run` rather than
    `torchrun` so the interpreter that runs the step also runs the workers.
    """
    entry = _entry(module=module, script=script)
    if max_restarts < 0:
        raise ValueError(f"max_restarts: must be >= 0, got {max_restarts}")
    if rdzv_timeout_s < 1:
        raise ValueError(f"rdzv_timeout_s: must be >= 1, got {rdzv_timeout_s}")
    command = [sys.executable, "-m", "torch.distributed.run"]
    if cluster.node_count == 1:
        command.append("--standalone")
    else:
        command += [
            f"--nnodes={cluster.node_count}",
            f"--node_rank={cluster.node_rank}",
            f"--master_addr={cluster.master_addr}",
            f"--master_port={cluster.master_port}",
            f"--rdzv_conf=timeout={rdzv_timeout_s}",
        ]
    command += [
        f"--nproc_per_node={cluster.procs_per_node}",
        f"--max_restarts={max_restarts}",
        *entry,
        *script_args,
    ]
    return command


def deepspeed_hostfile(hosts: Sequence[str], *, slots: int) -> str:
    """DeepSpeed's MPI-style hostfile: one `host slots=N` line per node, in node-rank order."""
    if slots < 1:
        raise ValueError(f"slots: must be >= 1, got {slots}")
    if not hosts:
        raise ValueError("hosts: the DeepSpeed launcher needs every node's hostname, got none")
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"hosts: must be unique, got {list(hosts)}")
    for host in hosts:
        if not host or any(c.isspace() for c in host):
            raise ValueError(f"hosts: {host!r} is not a hostname")
    return "".join(f"{host} slots={slots}\n" for host in hosts)


def deepspeed_command(
    cluster: ClusterInfo,
    *,
    hostfile: str,
    script_args: Sequence[str],
    module: str | None = None,
    script: str | None = None,
    ssh_port: int | None = None,
) -> list[str]:
    """The `deepspeed --hostfile` argv the primary runs; it reaches the other nodes over ssh.

    The master address is given rather than left to DeepSpeed, which would otherwise ssh to
    the first host and take the first address `hostname -I` prints.
    """
    entry = _entry(module=module, script=script)
    if ssh_port is not None and ssh_port == cluster.master_port:
        raise ValueError(
            f"ssh_port: {ssh_port} is also the master port; sshd and torch's store "
            "cannot listen on the same port of the primary"
        )
    command = [
        sys.executable,
        "-m",
        "deepspeed.launcher.runner",
        f"--hostfile={hostfile}",
        f"--master_addr={cluster.master_addr}",
        f"--master_port={cluster.master_port}",
        f"--num_nodes={cluster.node_count}",
        f"--num_gpus={cluster.procs_per_node}",
    ]
    if ssh_port is not None:
        command.append(f"--ssh_port={ssh_port}")
    return [*command, *entry, *script_args]


def deepspeed_env_file(
    env: Mapping[str, str],
    *,
    names: Collection[str] = FORWARDED_ENV_NAMES,
    prefixes: Sequence[str] = FORWARDED_ENV_PREFIXES,
) -> str:
    """Contents of `.deepspeed_env`, which DeepSpeed's launcher exports on every node: the
    variables of `env` named in `names` or starting with one of `prefixes`, secrets never.

    DeepSpeed reads it from the working or home folder, or from the path in DS_ENV_FILE. It
    pastes each line into a remote shell as `export KEY="VALUE";`, so a value holding a line
    break, a double quote, `$`, a backquote or a backslash would arrive changed: refused.
    """
    lines = []
    for name in sorted(env):
        if is_secret(name) or not (name in names or name.startswith(tuple(prefixes))):
            continue
        value = env[name]
        bad = sorted({c for c in value if c in _UNSAFE_IN_EXPORT})
        if bad:
            raise ValueError(
                f"{name}: its value holds {bad}, which DeepSpeed's launcher cannot pass to the "
                "other nodes unchanged; unset it"
            )
        lines.append(f"{name}={value}\n")
    return "".join(lines)


def _entry(*, module: str | None, script: str | None) -> list[str]:
    """Both launchers take `--module NAME` for `python -m NAME`, else a script path."""
    if (module is None) == (script is None):
        raise ValueError("give exactly one of module (a Python module) or script (a file path)")
    if module is not None:
        return ["--module", module]
    assert script is not None
    return [script]
