"""Messages for failed launches, from files laid out as torchrun lays them out."""

from __future__ import annotations

import json
from pathlib import Path

from llm_pipeline.launch.failures import failure_message

SUMMARY = """
[W] torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
llm_pipeline.train.worker FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-01_00:00:00
  host      : node
  rank      : {rank} (local_rank: {rank})
  exitcode  : {code} (pid: 1234)
  error_file: <N/A>
============================================================
"""


def _rank_dir(log_dir: Path, local_rank: int) -> Path:
    folder = log_dir / "run_x" / "attempt_0" / str(local_rank)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _record(log_dir: Path, local_rank: int, message: str, stamp: int) -> None:
    body = {"message": message, "extraInfo": {"py_callstack": "Traceback...", "timestamp": stamp}}
    (_rank_dir(log_dir, local_rank) / "error.json").write_text(json.dumps({"message": body}))


def _message(log_dir: Path, output: str, **kwargs: int) -> str:
    settings = {"node_rank": 1, "procs_per_node": 4, "collective_timeout_s": 60, **kwargs}
    return failure_message(log_dir=log_dir, launcher_output=output, exit_code=1, **settings)


def test_the_earliest_recorded_exception_is_the_cause(tmp_path: Path) -> None:
    _record(tmp_path, 2, "RuntimeError: Connection closed by peer", stamp=20)
    _record(tmp_path, 1, "ValueError: bad label", stamp=10)
    message = _message(tmp_path, SUMMARY.format(rank=2, code=1))
    assert message.startswith("training failed: rank 5 (node 1, local rank 1) raised:")
    assert "ValueError: bad label" in message


def test_a_killed_rank_is_blamed_over_its_peers_symptoms(tmp_path: Path) -> None:
    _record(tmp_path, 0, "RuntimeError: Connection closed by peer", stamp=10)
    (_rank_dir(tmp_path, 3) / "stderr.log").write_text("step 7\nstep 8\n")
    message = _message(tmp_path, SUMMARY.format(rank=3, code=-9))
    assert "rank 7 (node 1, local rank 3) was killed by signal 9 (SIGKILL" in message
    assert message.rstrip().endswith("step 8")


def test_out_of_memory_names_the_settings_to_lower(tmp_path: Path) -> None:
    _record(tmp_path, 0, "torch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB", stamp=1)
    message = _message(tmp_path, "")
    assert "ran out of GPU memory" in message and "per_device_batch_size" in message
    assert "gradient_checkpointing" in message and "offload" in message


def test_a_timeout_says_which_setting_bounded_it(tmp_path: Path) -> None:
    _record(tmp_path, 0, "DistStoreError: wait timeout after 60000ms", stamp=1)
    assert "train.collective_timeout_s (60 s)" in _message(tmp_path, "")


def test_without_any_rank_report_the_launchers_own_output_is_shown(tmp_path: Path) -> None:
    message = _message(tmp_path, "rendezvous timed out\n")
    assert "before any rank reported an error" in message and "rendezvous timed out" in message


def test_a_train_error_a_rank_raised_is_its_message_alone(tmp_path: Path) -> None:
    # Every rank stops alike (the counts it checks are global); the message is the worker's.
    said = "training stopped at step 40: 15 of the last 20 optimizer steps had non-finite"
    _record(tmp_path, 1, f"TrainError: {said}", stamp=11)
    _record(tmp_path, 0, f"TrainError: {said}", stamp=10)
    assert _message(tmp_path, SUMMARY.format(rank=1, code=1)) == said
