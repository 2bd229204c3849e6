"""Errors of the finetune step that name their cause and what to change.

`TrainError` is a `UserError` too, so the step reports it as one message rather than a
traceback; it is also a RuntimeError because a failed rank or a hung collective is a runtime
failure of the job, not a bad argument.
"""

from __future__ import annotations

from llm_pipeline.errors import UserError

#: The exit code of a worker, and of the finetune step, stopped by SIGTERM: EX_TEMPFAIL from
#: sysexits.h, "try again later". Any non-zero exit makes Vertex AI restart the worker, and
#: with `cluster.restart_job_on_worker_restart` the whole job, which then resumes; a distinct
#: code tells a preemption from a failure in logs and in the local runner's summary.
PREEMPTED_EXIT_CODE = 75


class TrainError(UserError, RuntimeError):
    """Training could not run or did not finish; the message says why and what to change."""


class TrainingPreempted(TrainError):
    """Training stopped on SIGTERM; the message says which checkpoint a restart resumes from."""

    exit_code = PREEMPTED_EXIT_CODE
