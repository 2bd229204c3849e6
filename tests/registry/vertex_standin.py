"""A stand-in for the Vertex AI v1 REST API on loopback, for the real `aiplatform` SDK.

Just the resources the registry and the runner use — models and their versions, endpoints
with deployed models and a traffic split, predictions, pipeline jobs, schedules, the
metadata contexts of an Experiment, long-running operations — with the request
checks the real API makes (required fields, label rules, traffic that sums to 100, no
undeploying a model that still has traffic), answered with the real API's error shape, so
a wrong request fails the test instead of passing silently. Every request is recorded
(`calls`) so tests can compare method, path and JSON body with the REST reference.

Operations finish when first polled, as a slow real one would after a while: the change
they make (a new version, a deployed model) shows up only then. `fail_next_deploy` and
`fail_predictions` make the next deployModel operation end in an error and predictions
fail, as a model server that never becomes healthy would.

Usage: `with VertexStandIn() as api: aiplatform.init(api_endpoint=api.url, ...)`.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..standins.loopback import LoopbackServer
from .vertex_standin_base import ApiError, require
from .vertex_standin_pipelines import PipelinesApi
from .vertex_standin_resources import EndpointsApi, ModelsApi


@contextlib.contextmanager
def aiplatform_settings_restored() -> Iterator[None]:
    """Put back `aiplatform.init`'s process-wide settings afterwards, so a test that points
    the SDK at a stand-in leaves no `api_endpoint` or credentials for the next one."""
    from google.cloud.aiplatform import initializer

    saved = dict(vars(initializer.global_config))
    try:
        yield
    finally:
        vars(initializer.global_config).clear()
        vars(initializer.global_config).update(saved)


@dataclass(frozen=True)
class Call:
    """One request as the stand-in received it (path unquoted, body parsed)."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any

    @property
    def verb(self) -> str:
        """`METHOD resource-kind[:action]`, e.g. `POST endpoints:deployModel`."""
        tail = self.path.split("/locations/", 1)[-1].split("/", 1)[-1]
        kind = tail.split("/")[0].split(":")[0]
        action = tail.rsplit(":", 1)[1] if ":" in tail.rsplit("/", 1)[-1] else ""
        if "/operations/" in tail:
            kind = "operations"
        return f"{self.method} {kind}" + (f":{action}" if action else "")


class VertexStandIn(ModelsApi, EndpointsApi, PipelinesApi, LoopbackServer):
    """The fake API served over HTTP on 127.0.0.1, recording every request."""

    def __init__(self, project: str = "test-project", region: str = "us-central1") -> None:
        super().__init__(project, region)
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    # -- switches and helpers for tests ---------------------------------------------------

    def fail_next_deploy(
        self, message: str = "Model server never became ready.", *, leave_deployed: bool = False
    ) -> None:
        """The next deployModel operation ends with an error; `leave_deployed` also applies
        its change first (the deployed model and split stay), as a half-done deploy would."""
        self._deploy_failure = (message, leave_deployed)

    def fail_predictions(self, mode: str = "error", times: int = 1) -> None:
        """The next `times` predictions fail: `error` (HTTP 500) or `empty` (blank answers)."""
        self._predict_failures = [mode] * times

    def find(self, verb: str) -> list[Call]:
        """The calls with this `Call.verb`, in order."""
        return [c for c in self.calls if c.verb == verb]

    def traffic(self, endpoint_id: str) -> dict[str, int]:
        return dict(self.endpoints[endpoint_id]["trafficSplit"])

    # -- dispatch -------------------------------------------------------------------------

    def respond(
        self, method: str, target: str, headers: Message, raw: bytes
    ) -> tuple[int, str, bytes]:
        code, answer = self.handle(method, target, raw)
        return code, "application/json; charset=UTF-8", json.dumps(answer).encode()

    def handle(self, method: str, target: str, raw: bytes) -> tuple[int, Any]:
        parts = urlsplit(target)
        path, query = unquote(parts.path), parse_qs(parts.query)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self._lock:
            self.calls.append(Call(method, path, query, body))
            try:
                require(isinstance(body, dict | None), "request body is not a JSON object")
                return 200, self._route(method, path, query, body or {})
            except ApiError as exc:
                error = {"code": exc.code, "message": exc.message, "status": exc.status}
                return exc.code, {"error": error}

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: dict) -> Any:
        # The SDK polls operations under /ui/ (the first of its http rules); both are real.
        version, _, name = path.lstrip("/").partition("/")
        if not name.startswith(f"{self.parent}/") or version not in ("v1", "ui"):
            raise ApiError(404, f"{path}: unknown project, location or API version")
        rest = name[len(self.parent) + 1 :]
        operation = r"(models|endpoints|schedules)/[^/]+/operations/[^/]+"
        if method == "GET" and re.fullmatch(operation, rest):
            return self._poll(name)
        require(version == "v1", f"{path}: only operations are served under /ui/", 404)
        routes: list[tuple[str, str, Callable[..., Any]]] = [
            ("POST", r"models:upload", self._upload),
            ("GET", r"models", self._list_models),
            ("GET", r"models/([^/:@]+)(?:@([^/:]+))?", self._get_model),
            ("GET", r"models/([^/:@]+):listVersions", self._list_versions),
            ("POST", r"models/([^/:@]+)@([^/:]+):mergeVersionAliases", self._merge_aliases),
            ("POST", r"endpoints", self._create_endpoint),
            ("GET", r"endpoints", self._list_endpoints),
            ("GET", r"endpoints/([^/:]+)", self._get_endpoint),
            ("PATCH", r"endpoints/([^/:]+)", self._patch_endpoint),
            ("POST", r"endpoints/([^/:]+):deployModel", self._deploy),
            ("POST", r"endpoints/([^/:]+):undeployModel", self._undeploy),
            ("POST", r"endpoints/([^/:]+):predict", self._predict),
            *self.pipeline_routes(),
        ]
        for verb, pattern, handler in routes:
            match = re.fullmatch(pattern, rest)
            if verb == method and match:
                return handler(*match.groups(), query=query, body=body)
        raise ApiError(404, f"{method} {path}: no such method in this stand-in")
