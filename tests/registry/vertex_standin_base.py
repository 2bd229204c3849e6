"""The stand-in's shared parts: the API's error answers, its request rules, its state,
and long-running operations. See `vertex_standin.py`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

TYPE = "type.googleapis.com/google.cloud.aiplatform.v1."
KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
VALUE = re.compile(r"[a-z0-9_-]{0,63}")
ALIAS = re.compile(r"[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 500: "INTERNAL"}
NO_ACCELERATOR = (None, 0, "ACCELERATOR_TYPE_UNSPECIFIED")


class ApiError(Exception):
    """An error answer: HTTP status, and the message the real API would give."""

    def __init__(self, code: int, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status or STATUS[code]


def require(condition: Any, message: str, code: int = 400) -> None:
    """Answer `code` with `message` unless `condition` holds."""
    if not condition:
        raise ApiError(code, message)


def check_split(endpoint: dict, split: dict, *, allow_new: bool) -> None:
    """A trafficSplit names deployed models (or "0", the one being deployed) and sums to
    100, or is empty."""
    known = {m["id"] for m in endpoint["deployedModels"]} | ({"0"} if allow_new else set())
    unknown = sorted(set(split) - known)
    require(not unknown, f"traffic_split names unknown deployed models {unknown}")
    values = list(split.values())
    require(
        all(isinstance(v, int) and 0 <= v <= 100 for v in values),
        f"traffic_split values must be 0-100: {split}",
    )
    require(not split or sum(values) == 100, f"traffic_split must sum to 100: {split}")


def check_labels(labels: dict) -> None:
    """Vertex's label rules: at most 64; keys and values of [a-z0-9_-], keys from a letter."""
    require(isinstance(labels, dict) and len(labels) <= 64, "at most 64 labels")
    for key, value in labels.items():
        require(KEY.fullmatch(key), f"invalid label key {key!r}")
        require(
            isinstance(value, str) and VALUE.fullmatch(value),
            f"invalid label value {value!r} for {key!r}",
        )


def name_filter(query: dict) -> str | None:
    """The display name a list filter asks for (the only filter the registry sends)."""
    text = (query.get("filter") or [""])[0].strip()
    if not text:
        return None
    match = re.fullmatch(r'(?:display_name|displayName)\s*=\s*("(?:[^"\\]|\\.)*")', text)
    require(match, f"unsupported filter {text!r}")
    assert match is not None
    return str(json.loads(match.group(1)))


class StandInState:
    """What the fake API holds, and the operations that change it when polled."""

    _deploy_failure: tuple[str, bool] | None  #: (message, leave deployed) for the next deploy
    _predict_failures: list[str]  #: "error" or "empty", one per coming prediction

    def __init__(self, project: str = "test-project", region: str = "us-central1") -> None:
        self.project, self.region = project, region
        self.parent = f"projects/{project}/locations/{region}"
        self.models: dict[str, dict[str, dict[str, Any]]] = {}  # model id → version id → model
        self.endpoints: dict[str, dict[str, Any]] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        self.answer: Callable[[str, dict[str, Any]], str] = lambda text, model: (
            f"summary by {model['displayName']}@{model['versionId']}: {text[:40]}"
        )
        self._deploy_failure = None
        self._predict_failures = []
        self._ids = 1000
        self._clock = datetime(2024, 1, 1, tzinfo=UTC)

    # -- operations -----------------------------------------------------------------------

    def _operation(self, resource: str, kind: str, finish: Callable[[], dict]) -> dict:
        name = f"{resource}/operations/{self._next_id()}"
        meta = {
            "@type": f"{TYPE}{kind}OperationMetadata",
            "genericMetadata": {"createTime": self._now(), "updateTime": self._now()},
        }
        self.operations[name] = {"name": name, "metadata": meta, "done": False, "_finish": finish}
        return self._public(self.operations[name])

    def _poll(self, name: str) -> dict:
        op = self.operations.get(name)
        require(op, f"operation {name} not found", 404)
        assert op is not None
        if not op["done"]:
            op["done"] = True
            try:
                op["response"] = op.pop("_finish")()
            except ApiError as exc:
                op["error"] = {"code": 9 if exc.code == 400 else 13, "message": exc.message}
        return self._public(op)

    @staticmethod
    def _public(op: dict) -> dict:
        return {k: v for k, v in op.items() if not k.startswith("_")}

    # -- ids and a clock that ticks once per use, so every time is distinct ---------------

    def _next_id(self) -> str:
        self._ids += 1
        return str(self._ids)

    def _now(self) -> str:
        self._clock += timedelta(seconds=1)
        return self._clock.strftime("%Y-%m-%dT%H:%M:%SZ")
