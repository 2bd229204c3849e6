"""The Vertex stand-in itself: it refuses what the real API refuses, and records requests.

Without this a wrong request from the registry could pass against a too-lenient fake.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from llm_pipeline.registry.vertex.registry import VertexRegistry

pytest.importorskip("google.cloud.aiplatform", reason="the vertex extra is not installed")

from .test_vertex import (
    ENDPOINT,
    PARENT,
    PROJECT,
    REGION,
    deployed_ids,
    make_registry,
    register,
    split,
)
from .vertex_standin import Call, VertexStandIn, aiplatform_settings_restored


@pytest.fixture
def api() -> Iterator[VertexStandIn]:
    with aiplatform_settings_restored(), VertexStandIn(PROJECT, REGION) as standin:
        yield standin


@pytest.fixture
def registry(api: VertexStandIn) -> VertexRegistry:
    return make_registry(api)


def send(api: VertexStandIn, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{api.url}/v1/{PARENT}/{path}", data, method=method)
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_the_standin_refuses_what_the_api_refuses(
    api: VertexStandIn, registry: VertexRegistry
) -> None:
    first, second = register(registry, 1, 37.0), register(registry, 2, 38.0)
    registry.deploy(first, ENDPOINT)
    registry.deploy(second, ENDPOINT, traffic_percent=50)
    (endpoint_id,) = api.endpoints
    ids = list(deployed_ids(api))
    resources = {"machineSpec": {"machineType": "n1-standard-8"}, "minReplicaCount": 1}
    bad = [
        (
            "PATCH",
            f"endpoints/{endpoint_id}?updateMask=trafficSplit",
            {"trafficSplit": {ids[0]: 60}},
        ),
        ("PATCH", f"endpoints/{endpoint_id}?updateMask=labels", {"labels": {"Team": "x"}}),
        ("PATCH", f"endpoints/{endpoint_id}", {"labels": {}}),
        ("POST", f"endpoints/{endpoint_id}:undeployModel", {"deployedModelId": ids[0]}),
        (
            "POST",
            f"endpoints/{endpoint_id}:undeployModel",
            {"deployedModelId": ids[0], "trafficSplit": {ids[0]: 50, ids[1]: 50}},
        ),
        (
            "POST",
            f"endpoints/{endpoint_id}:deployModel",
            {"deployedModel": {"model": first.resource_name}, "trafficSplit": {"0": 100}},
        ),
        (
            "POST",
            f"endpoints/{endpoint_id}:deployModel",
            {
                "deployedModel": {"model": first.resource_name, "dedicatedResources": resources},
                "trafficSplit": {"0": 50, ids[0]: 10},
            },
        ),
        ("POST", "models:upload", {"model": {"displayName": "m"}}),
        (
            "POST",
            "models:upload",
            {
                "model": {
                    "displayName": "m",
                    "containerSpec": {"imageUri": "i"},
                    "artifactUri": "/local/path",
                }
            },
        ),
        ("POST", f"endpoints/{endpoint_id}:predict", {"instances": []}),
        ("GET", "models?filter=labels.x%3D1", None),
    ]
    for method, path, body in bad:
        code, answer = send(api, method, path, body)
        assert code == 400, (method, path, answer)
        assert answer["error"]["status"] == "INVALID_ARGUMENT" and answer["error"]["message"]
    assert send(api, "GET", "models/404")[0] == 404
    assert split(api) == {"1": 50, "2": 50}


def test_every_request_is_recorded(api: VertexStandIn) -> None:
    send(api, "POST", "endpoints", {"displayName": "e", "labels": {"a": "b"}})
    (call,) = api.calls
    assert call == Call(
        "POST", f"/v1/{PARENT}/endpoints", {}, {"displayName": "e", "labels": {"a": "b"}}
    )
    assert call.verb == "POST endpoints"
