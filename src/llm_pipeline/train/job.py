"""The finetune step's entry point: read the cluster, start this node's training processes.

Every replica of a job calls `run_finetune` the same way. It works out which node it is from
the environment (Vertex `CLUSTER_SPEC`, SageMaker, torch variables, or a single machine),
hands the typed configs to the training processes as one JSON file, starts them with
`torchrun` (or DeepSpeed's launcher), and waits. The primary returns the metrics and the
model's location; other replicas return a result that says they wrote nothing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.errors import PREEMPTED_EXIT_CODE, TrainError, TrainingPreempted
from llm_pipeline.fit.stage import StageChoice
from llm_pipeline.launch.cluster import ClusterInfo, NotATrainingNode, detect_cluster
from llm_pipeline.launch.commands import torchrun_command
from llm_pipeline.launch.failures import failure_message, rank_exit_codes
from llm_pipeline.launch.supervisor import LauncherExit, run_launcher
from llm_pipeline.storage import is_remote
from llm_pipeline.tasks import DEFAULT_TASK
from llm_pipeline.train.checkpoints import resolve_checkpoint_root
from llm_pipeline.train.spec import WorkerSpec
from llm_pipeline.train.zero_stage import resolve_zero_stage

WORKER_MODULE = "llm_pipeline.train.worker"
# How a rank ends on SIGTERM: with the preemption code, or killed by it before its handler.
_STOPPED_BY_SIGTERM = frozenset({PREEMPTED_EXIT_CODE, -signal.SIGTERM})


@dataclass(frozen=True)
class FinetuneResult:
    """What one replica's finetune step produced.

    On the primary: `output_dir` holds the model and `metrics` the training figures (with
    the ZeRO stage it trained under; `zero_stage` says it and why in words). On
    any other replica both are empty and `message` says why; the component exits 0 there
    without writing outputs.
    """

    is_primary: bool
    node_rank: int
    node_count: int
    output_dir: str | None
    metrics: dict[str, float | int | None] = field(default_factory=dict)
    checkpoint_folder: str | None = None
    # The Trainer's log entries (loss per logging step, eval loss, ...), primary only.
    log_history: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    # The ZeRO stage trained under and why (`StageChoice.describe`): `0 (auto: ...)`; its
    # number is also metrics["zero_stage"]. Primary only.
    zero_stage: str = ""


def check_output_dir(output_dir: str) -> None:
    """Refuse object-store URIs early: a folder there cannot appear atomically. (Here, not in
    train/outputs.py beside the code that writes the folder: that module loads transformers'
    Trainer and peft, about 3 s that the launching process, the finetune step's, never needs.)
    """
    if is_remote(output_dir):
        raise TrainError(
            f"output folder {output_dir!r}: must be a local path (on Vertex, the artifact's "
            "/gcs/ path); object stores have no atomic folder rename"
        )


def run_finetune(
    *,
    dataset_dir: str,
    output_dir: str,
    model: ModelConfig,
    train: TrainConfig,
    cluster: ClusterConfig,
    tensorboard_dir: str | None = None,
    env: Mapping[str, str] = os.environ,
    task: str = DEFAULT_TASK,
) -> FinetuneResult:
    """Fine-tune on this node's share of the cluster; returns when every local rank is done.

    `dataset_dir`: the preprocess step's DatasetDict (local, `/gcs/` or `gs://`).
    `output_dir`: local folder (Vertex: the artifact's `/gcs/` path) for the model; written
    whole at the end, by the primary only. TensorBoard event files go to `tensorboard_dir`
    and are also copied to `AIP_TENSORBOARD_LOG_DIR` when Vertex sets it (neither: none).
    Checkpoints: see `checkpoints.resolve_checkpoint_root`. `task` (a `tasks.TASKS` name)
    picks the model kind: a seq2seq model or a causal LM. A `train.zero_stage` of "auto"
    is resolved here, on the machine that trains (`zero_stage.py`), and printed in one
    line. Raises TrainError naming the failing rank and its error.
    """
    check_output_dir(output_dir)
    try:
        info = detect_cluster(env, procs_per_node=processes_per_node(cluster))
    except NotATrainingNode as err:
        return FinetuneResult(False, -1, 0, None, message=str(err))
    except ValueError as err:
        raise TrainError(f"cluster environment: {err}") from err
    train, zero = resolve_zero_stage(
        train,
        model=model,
        task=task,
        dataset_dir=dataset_dir,
        processes=info.procs_per_node,
        nodes=info.node_count,
    )
    print(f"ZeRO stage: {zero.describe()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="llm-finetune-") as work:
        spec = WorkerSpec(
            dataset_dir=dataset_dir,
            output_dir=output_dir,
            model=model,
            train=train,
            checkpoint_root=resolve_checkpoint_root(
                env, configured=train.checkpoint_dir, output_dir=output_dir
            ),
            tensorboard_dir=tensorboard_dir,
            tensorboard_mirror=env.get("AIP_TENSORBOARD_LOG_DIR") or None,
            work_dir=work,
            node_count=info.node_count,
            procs_per_node=info.procs_per_node,
            task=task,
        )
        if cluster.launcher == "deepspeed" and info.node_count > 1:
            from llm_pipeline.launch.deepspeed_nodes import launch_with_deepspeed

            launch_with_deepspeed(
                spec, info, module="llm_pipeline.train.worker", env=env, run=_run_launcher
            )
        else:
            spec_path = Path(work) / "spec.json"
            spec.write(spec_path)
            command = _local_command(cluster, info, spec_path)
            _run_launcher(command, spec=spec, info=info, env=_with_local_size(env, info))
        return _result(spec, info, zero)


def processes_per_node(cluster: ClusterConfig) -> int:
    """`cluster.processes`, else one per visible GPU, else 1 on a CPU-only machine."""
    if cluster.processes is not None:
        return cluster.processes
    return max(torch.cuda.device_count(), 1)


def _local_command(cluster: ClusterConfig, info: ClusterInfo, spec_path: Path) -> list[str]:
    args = ["--spec", str(spec_path)]
    if cluster.launcher == "deepspeed":
        # One node: DeepSpeed's launcher starts local processes itself, no ssh needed. A free
        # port, as torchrun's --standalone picks one, so two jobs on a machine do not clash.
        return [
            sys.executable,
            "-m",
            "deepspeed.launcher.runner",
            f"--num_gpus={info.procs_per_node}",
            f"--master_port={_free_port()}",
            "--module",
            WORKER_MODULE,
            *args,
        ]
    return torchrun_command(info, script_args=args, module=WORKER_MODULE)


def _with_local_size(env: Mapping[str, str], info: ClusterInfo) -> dict[str, str]:
    """`env` with LOCAL_SIZE, the processes on this node, as DeepSpeed's own launcher sets it.

    torchrun sets LOCAL_WORLD_SIZE only. Without LOCAL_SIZE, DeepSpeed's CPU accelerator
    answers each `device_count()` by running `numactl` in a subprocess
    (accelerator/cpu_accelerator.py), which ZeRO calls for every gradient reduce: dozens
    of forks per step on a CPU run. A value already set is kept.
    """
    return {"LOCAL_SIZE": str(info.procs_per_node), **env}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_launcher(
    command: Sequence[str], *, spec: WorkerSpec, info: ClusterInfo, env: Mapping[str, str]
) -> None:
    """Run the launcher, echoing its output; raise TrainError naming the rank that failed."""
    log_dir = Path(spec.work_dir) / "logs"
    ended = run_launcher(command, env=env, log_dir=log_dir)
    if ended.code == 0:
        return
    preempted = _preemption_message(spec, ended)
    if preempted is not None:
        raise TrainingPreempted(preempted)
    raise TrainError(
        failure_message(
            log_dir=log_dir,
            launcher_output=ended.output_tail,
            exit_code=ended.code,
            node_rank=info.node_rank,
            procs_per_node=info.procs_per_node,
            collective_timeout_s=spec.train.collective_timeout_s,
        )
    )


def _preemption_message(spec: WorkerSpec, ended: LauncherExit) -> str | None:
    """What a launch stopped by SIGTERM saved, or None if it was not stopped so.

    Stopped so: this process passed a SIGTERM on, rank 0 reported the step it saved, or
    every rank torchrun lists ended by SIGTERM, handled (the preemption code) or not yet (a
    SIGTERM sent to the ranks themselves).
    """
    saved = _read_result(spec) or {}
    codes = rank_exit_codes(ended.output_tail)
    by_ranks = bool(codes) and all(code in _STOPPED_BY_SIGTERM for code in codes)
    if ended.forwarded_signal is None and "preempted_at_step" not in saved and not by_ranks:
        return None
    step = saved.get("preempted_at_step")
    if step is None:
        return (
            "training was stopped by SIGTERM before it saved anything (before its first "
            "step, or killed during the save); a restarted job resumes from the newest "
            "complete checkpoint, if there is one"
        )
    return (
        f"training was stopped by SIGTERM and saved a complete checkpoint at step {step} in "
        f"{saved.get('checkpoint_folder')}; a restarted job resumes from it"
    )


def _read_result(spec: WorkerSpec) -> dict[str, Any] | None:
    if not spec.result_path.is_file():
        return None
    payload: dict[str, Any] = json.loads(spec.result_path.read_text(encoding="utf-8"))
    return payload


def _result(spec: WorkerSpec, info: ClusterInfo, zero: StageChoice) -> FinetuneResult:
    if not info.is_primary:
        return FinetuneResult(
            is_primary=False,
            node_rank=info.node_rank,
            node_count=info.node_count,
            output_dir=None,
            message=f"node {info.node_rank} of {info.node_count} trained; the primary "
            "(node 0) writes the model and metrics",
        )
    payload = _read_result(spec)
    if payload is None:
        raise TrainError("training ended without a result from rank 0; see the log above")
    return FinetuneResult(
        is_primary=True,
        node_rank=info.node_rank,
        node_count=info.node_count,
        output_dir=spec.output_dir,
        metrics={**payload["metrics"], "zero_stage": zero.stage},
        checkpoint_folder=payload["checkpoint_folder"],
        log_history=payload["log"],
        message="trained and wrote the model",
        zero_stage=zero.describe(),
    )
