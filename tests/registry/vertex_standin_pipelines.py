"""The stand-in's pipeline resources: pipeline jobs that move through their states when
read, schedules (create, list, get, pause, resume, delete), and the Vertex ML Metadata
contexts an Experiment is made of. Checked as the v1 REST API checks them. See
`vertex_standin.py`."""

from __future__ import annotations

import re
from typing import Any

from .vertex_standin_base import TYPE, ApiError, StandInState, check_labels, require

CRON_PREFIX = re.compile(r"(?:CRON_TZ|TZ)=\S+ ")


class PipelinesApi(StandInState):
    """pipelineJobs create/get, schedules, metadataStores/default/contexts."""

    def __init__(self, project: str = "test-project", region: str = "us-central1") -> None:
        super().__init__(project, region)
        self.pipeline_jobs: dict[str, dict[str, Any]] = {}
        self.schedules: dict[str, dict[str, Any]] = {}
        self.contexts: dict[str, dict[str, Any]] = {}
        #: The states a new job goes through, one per read (the last one stays).
        self.job_states = ["PIPELINE_STATE_PENDING", "PIPELINE_STATE_RUNNING"]

    def pipeline_routes(self) -> list[tuple[str, str, Any]]:
        return [
            ("POST", r"pipelineJobs", self._create_job),
            ("GET", r"pipelineJobs/([^/:]+)", self._get_job),
            ("POST", r"schedules", self._create_schedule),
            ("GET", r"schedules", self._list_schedules),
            ("GET", r"schedules/([^/:]+)", self._get_schedule),
            ("POST", r"schedules/([^/:]+):pause", self._pause),
            ("POST", r"schedules/([^/:]+):resume", self._resume),
            ("DELETE", r"schedules/([^/:]+)", self._delete_schedule),
            ("GET", r"metadataStores/([^/:]+)", self._get_store),
            ("GET", r"metadataStores/default/contexts/([^/:]+)", self._get_context),
            ("POST", r"metadataStores/default/contexts", self._create_context),
            (
                "POST",
                r"metadataStores/default/contexts/([^/:]+):addContextChildren",
                self._add_children,
            ),
        ]

    # -- pipeline jobs --------------------------------------------------------------------

    def _check_job(self, job: dict, *, named: bool = True) -> None:
        """A run to create; in a schedule's request its display name is the schedule's."""
        spec = job.get("pipelineSpec")
        require(isinstance(spec, dict) and spec.get("root"), "pipeline_spec is required")
        require(job.get("displayName") or not named, "display_name is required")
        runtime = job.get("runtimeConfig") or {}
        require(
            str(runtime.get("gcsOutputDirectory", "")).startswith("gs://"),
            "runtime_config.gcs_output_directory must be a gs:// URI",
        )
        declared = spec["root"].get("inputDefinitions", {}).get("parameters", {})
        unknown = sorted(set(runtime.get("parameterValues", {})) - set(declared))
        require(not unknown, f"parameter_values name unknown parameters {unknown}")
        check_labels(job.get("labels", {}))

    def _create_job(self, *, query: dict, body: Any) -> dict:
        self._check_job(body)
        job_id = (query.get("pipelineJobId") or [self._next_id()])[0]
        require(re.fullmatch(r"[a-z][a-z0-9-]{0,127}", job_id), f"bad job id {job_id!r}")
        require(job_id not in self.pipeline_jobs, f"pipeline job {job_id} exists", 409)
        job = {
            **body,
            "name": f"{self.parent}/pipelineJobs/{job_id}",
            "state": "PIPELINE_STATE_PENDING",
            "createTime": self._now(),
            "_reads": 0,
        }
        self.pipeline_jobs[job_id] = job
        return self._public(job)

    def _get_job(self, job_id: str, *, query: dict, body: Any) -> dict:
        job = self.pipeline_jobs.get(job_id)
        require(job, f"pipeline job {job_id} not found", 404)
        assert job is not None
        job["state"] = self.job_states[min(job["_reads"], len(self.job_states) - 1)]
        job["_reads"] += 1
        if job["state"] != "PIPELINE_STATE_PENDING":
            # Vertex makes the run's metadata context once the run starts.
            job["jobDetail"] = {
                "pipelineRunContext": {
                    "name": f"{self.parent}/metadataStores/default/contexts/{job_id}",
                    "displayName": job_id,
                    "schemaTitle": "system.PipelineRun",
                }
            }
        return self._public(job)

    # -- schedules ------------------------------------------------------------------------

    def _create_schedule(self, *, query: dict, body: Any) -> dict:
        require(body.get("displayName"), "display_name is required")
        cron = str(body.get("cron", ""))
        require(len(CRON_PREFIX.sub("", cron, count=1).split()) == 5, f"invalid cron {cron!r}")
        require(int(body.get("maxConcurrentRunCount", 0)) >= 1, "max_concurrent_run_count >= 1")
        request = body.get("createPipelineJobRequest") or {}
        require(request.get("parent") == self.parent, "create_pipeline_job_request.parent")
        self._check_job(request.get("pipelineJob") or {}, named=False)
        schedule_id = self._next_id()
        schedule = {
            **body,
            "name": f"{self.parent}/schedules/{schedule_id}",
            "state": "ACTIVE",
            "createTime": self._now(),
            "nextRunTime": "2027-01-04T02:00:00Z",
        }
        self.schedules[schedule_id] = schedule
        return schedule

    def _list_schedules(self, *, query: dict, body: Any) -> dict:
        return {"schedules": list(reversed(self.schedules.values()))}

    def _get_schedule(self, schedule_id: str, *, query: dict, body: Any) -> dict:
        require(schedule_id in self.schedules, f"schedule {schedule_id} not found", 404)
        return self.schedules[schedule_id]

    def _pause(self, schedule_id: str, *, query: dict, body: Any) -> dict:
        schedule = self._get_schedule(schedule_id, query=query, body=body)
        require(schedule["state"] == "ACTIVE", "only an ACTIVE schedule can be paused")
        schedule["state"] = "PAUSED"
        return {}

    def _resume(self, schedule_id: str, *, query: dict, body: Any) -> dict:
        schedule = self._get_schedule(schedule_id, query=query, body=body)
        require(schedule["state"] == "PAUSED", "only a PAUSED schedule can be resumed")
        schedule["state"] = "ACTIVE"
        return {}

    def _delete_schedule(self, schedule_id: str, *, query: dict, body: Any) -> dict:
        self._get_schedule(schedule_id, query=query, body=body)
        resource = f"{self.parent}/schedules/{schedule_id}"

        def finish() -> dict:
            del self.schedules[schedule_id]
            return {"@type": "type.googleapis.com/google.protobuf.Empty"}

        return self._operation(resource, "Delete", finish)

    # -- Vertex ML Metadata: an Experiment is a context, a run is its child -------------

    def _get_store(self, store: str, *, query: dict, body: Any) -> dict:
        require(store == "default", f"metadata store {store} not found", 404)
        return {"name": f"{self.parent}/metadataStores/default"}

    def _get_context(self, context_id: str, *, query: dict, body: Any) -> dict:
        if context_id not in self.contexts:
            raise ApiError(404, f"context {context_id} not found")
        return self.contexts[context_id]

    def _create_context(self, *, query: dict, body: Any) -> dict:
        context_id = (query.get("contextId") or [self._next_id()])[0]
        require(context_id not in self.contexts, f"context {context_id} exists", 409)
        self.contexts[context_id] = {
            **body,
            "name": f"{self.parent}/metadataStores/default/contexts/{context_id}",
            "createTime": self._now(),
            "childContexts": [],
        }
        return self.contexts[context_id]

    def _add_children(self, context_id: str, *, query: dict, body: Any) -> dict:
        context = self._get_context(context_id, query=query, body=body)
        context["childContexts"] += list(body.get("childContexts", []))
        return {"@type": f"{TYPE}AddContextChildrenResponse"}
