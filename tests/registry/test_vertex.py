"""VertexRegistry against the real aiplatform SDK and a stand-in of the Vertex REST API.

The stand-in (`vertex_standin.py`) checks requests as the real API does and records them,
so these tests compare what the SDK sends — method, path, JSON body, order — with the REST
reference: uploads under one parent model, endpoints found by name, deployModel with
dedicated resources and a "0" traffic key, undeploy only after traffic moved, and the
endpoint left as it was when a deploy or its probe fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llm_pipeline.config.deploy import DeployConfig
from llm_pipeline.errors import UserError
from llm_pipeline.registry.base import DeployError, ModelVersion, RegistryError
from llm_pipeline.registry.vertex.registry import VertexRegistry

from .vertex_standin import VertexStandIn, aiplatform_settings_restored

pytest.importorskip("google.cloud.aiplatform", reason="the vertex extra is not installed")

PROJECT, REGION = "test-project", "us-central1"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
ENDPOINT = "summarizer-endpoint"
IMAGE = f"us-docker.pkg.dev/{PROJECT}/llm-pipeline/serve:0.1.0"
ENV = {"SUMMARY_PREFIX": "summarize: ", "MAX_INPUT_TOKENS": "512"}


@pytest.fixture
def api() -> Iterator[VertexStandIn]:
    with aiplatform_settings_restored(), VertexStandIn(PROJECT, REGION) as standin:
        yield standin


def make_registry(api: VertexStandIn, **deploy: Any) -> VertexRegistry:
    """A registry whose SDK talks to the stand-in (REST, no credentials needed)."""
    from google.auth.credentials import AnonymousCredentials

    return VertexRegistry(
        project=PROJECT,
        region=REGION,
        deploy=DeployConfig(target="vertex", **deploy),
        serving_image=IMAGE,
        credentials=AnonymousCredentials(),
        api_endpoint=api.url,
    )


@pytest.fixture
def registry(api: VertexStandIn) -> VertexRegistry:
    return make_registry(api)


def register(registry: VertexRegistry, n: int, rouge: float) -> ModelVersion:
    """Version `n` of "summarizer", as the deploy step registers it."""
    return registry.register(
        model="summarizer",
        model_dir=f"gs://bucket/runs/{n}/model",
        metrics={"rougeLsum": rouge, "rouge1": 40.5},
        run=f"run-{n}",
        config={"data": {"prefix": "summarize: "}},
        serving_env=ENV,
    )


def model_of(version: ModelVersion) -> str:
    """The parent model's resource name."""
    return (version.resource_name or "").partition("@")[0]


def deployed_ids(api: VertexStandIn) -> dict[str, str]:
    """Deployed model id → model version id, on the one endpoint."""
    (endpoint,) = api.endpoints.values()
    return {m["id"]: m["modelVersionId"] for m in endpoint["deployedModels"]}


def split(api: VertexStandIn) -> dict[str, int]:
    """The one endpoint's traffic split, by model version id."""
    ids = deployed_ids(api)
    (endpoint,) = api.endpoints.values()
    return {ids[k]: v for k, v in endpoint["trafficSplit"].items() if v}


def order(api: VertexStandIn, *verbs: str) -> list[str]:
    """The calls with these verbs (no polls or reads), in the order they came."""
    return [c.verb for c in api.calls if c.verb in verbs]


def test_register_uploads_each_version_under_one_parent_model(
    api: VertexStandIn, registry: VertexRegistry
) -> None:
    first = register(registry, 1, 37.0269)
    second = register(registry, 2, 38.0)

    uploads = api.find("POST models:upload")
    assert [c.path for c in uploads] == [f"/v1/{PARENT}/models:upload"] * 2
    assert "parentModel" not in uploads[0].body
    assert uploads[1].body["parentModel"] == model_of(first)
    model = uploads[0].body["model"]
    assert model["displayName"] == "summarizer"
    assert model["artifactUri"] == "gs://bucket/runs/1/model"
    assert model["labels"] == {"m_rouge-lsum": "37_0269", "m_rouge1": "40_5", "run": "run-1"}
    assert model["containerSpec"] == {
        "imageUri": IMAGE,
        "predictRoute": "/predict",
        "healthRoute": "/health",
        "ports": [{"containerPort": 8080}],
        "env": [{"name": k, "value": v} for k, v in ENV.items()],
        "deploymentTimeout": "900s",  # deploy.health_timeout_s: Vertex gives up after it
    }
    assert "versionAliases" not in model  # not the default until it serves
    assert uploads[1].body["model"]["labels"]["m_rouge-lsum"] == "38"

    assert (first.version, second.version) == ("1", "2")
    assert second.metrics == {"rougeLsum": 38.0, "rouge1": 40.5}
    assert second.uri == "gs://bucket/runs/2/model"
    assert second.run == "run-2" and second.serving_env == ENV
    assert second.resource_name == f"{model_of(first)}@2"
    assert registry.versions("summarizer") == [first, second]
    assert registry.versions("unknown") == []
    assert registry.models() == ["summarizer"]
    (versions,) = api.models.values()
    assert versions["2"]["versionAliases"] == []


@pytest.mark.parametrize(
    ("model_dir", "uri"),
    [("/gcs/bucket/runs/3/model", "gs://bucket/runs/3/model"), ("gs://b/m/", "gs://b/m")],
)
def test_register_uploads_from_cloud_storage(
    api: VertexStandIn, registry: VertexRegistry, model_dir: str, uri: str
) -> None:
    version = registry.register(model="summarizer", model_dir=model_dir, metrics={})
    assert version.uri == uri


@pytest.mark.parametrize("model_dir", ["runs/model", "/tmp/model", "s3://b/m", "gs://", "/gcs/"])
def test_register_refuses_a_folder_vertex_cannot_read(
    api: VertexStandIn, registry: VertexRegistry, model_dir: str
) -> None:
    with pytest.raises(RegistryError, match="gs://"):
        registry.register(model="summarizer", model_dir=model_dir, metrics={})
    assert not api.find("POST models:upload")


def test_deploy_creates_the_endpoint_once_then_moves_traffic_before_undeploying(
    api: VertexStandIn, registry: VertexRegistry
) -> None:
    first, second = register(registry, 1, 37.0), register(registry, 2, 38.0)

    outcome = registry.deploy(first, ENDPOINT, probe=["A long article."])
    (lookup,) = api.find("GET endpoints")[:1]
    assert lookup.query["filter"] == [f'display_name="{ENDPOINT}"']
    (create,) = api.find("POST endpoints")
    assert create.path == f"/v1/{PARENT}/endpoints"
    assert create.body["displayName"] == ENDPOINT
    (endpoint_id,) = api.endpoints
    (deploy,) = api.find("POST endpoints:deployModel")
    assert deploy.path == f"/v1/{PARENT}/endpoints/{endpoint_id}:deployModel"
    assert deploy.body == {
        "deployedModel": {
            "model": first.resource_name,
            "dedicatedResources": {
                "machineSpec": {"machineType": "n1-standard-8"},
                "minReplicaCount": 1,
                "maxReplicaCount": 1,
            },
        },
        "trafficSplit": {"0": 100},
    }
    (predict,) = api.find("POST endpoints:predict")
    assert predict.body == {"instances": ["A long article."]}
    assert outcome.prediction == "summary by summarizer@1: A long article."
    assert outcome.previous is None and outcome.retired == ()
    assert split(api) == {"1": 100}
    (old_id,) = deployed_ids(api)

    outcome = registry.deploy(second, ENDPOINT, probe=["Another article."])
    assert len(api.find("POST endpoints")) == 1  # found by display name, not created again
    (new_id,) = deployed_ids(api)
    assert api.find("POST endpoints:deployModel")[1].body["trafficSplit"] == {"0": 100}
    assert api.find("POST endpoints:undeployModel")[0].body == {
        "deployedModelId": old_id,
        "trafficSplit": {new_id: 100},
    }
    assert order(
        api, "POST endpoints:deployModel", "POST endpoints:predict", "POST endpoints:undeployModel"
    )[2:] == [
        "POST endpoints:deployModel",
        "POST endpoints:predict",
        "POST endpoints:undeployModel",
    ]
    assert outcome.previous == first and outcome.retired == (first,)
    assert [(d.version, d.traffic) for d in outcome.endpoint.deployed] == [(second, 100)]
    assert split(api) == {"2": 100}
    merge = api.find("POST models:mergeVersionAliases")[-1]
    assert merge.path == f"/v1/{second.resource_name}:mergeVersionAliases"
    assert merge.body == {"versionAliases": ["default"]}
    (versions,) = api.models.values()
    assert versions["2"]["versionAliases"] == ["default"]
    assert versions["1"]["versionAliases"] == []


def test_deploy_asks_for_the_configured_machine(api: VertexStandIn) -> None:
    from google.cloud.aiplatform_v1 import AcceleratorType

    registry = make_registry(
        api,
        machine_type="n1-standard-4",
        accelerator_type="NVIDIA_TESLA_T4",
        accelerator_count=1,
        min_replica_count=1,
        max_replica_count=3,
        health_timeout_s=120,
    )
    registry.deploy(register(registry, 1, 37.0), ENDPOINT)
    (deploy,) = api.find("POST endpoints:deployModel")
    # The SDK asks for integer enums ($alt=json;enum-encoding=int), as the API allows.
    assert deploy.body["deployedModel"]["dedicatedResources"] == {
        "machineSpec": {
            "machineType": "n1-standard-4",
            "acceleratorType": int(AcceleratorType.NVIDIA_TESLA_T4),
            "acceleratorCount": 1,
        },
        "minReplicaCount": 1,
        "maxReplicaCount": 3,
    }


def test_served_version_is_what_the_endpoint_serves_not_the_newest(
    api: VertexStandIn, registry: VertexRegistry
) -> None:
    first = register(registry, 1, 37.0269)
    registry.deploy(first, ENDPOINT)
    newer = register(registry, 2, 50.0)  # registered, never deployed (lost its gate)

    served = registry.served_version(ENDPOINT)
    assert served == first
    assert served.metrics == {"rougeLsum": 37.0269, "rouge1": 40.5}
    assert registry.versions("summarizer")[-1] == newer
    assert registry.served_version("no-such-endpoint") is None
    state = registry.endpoint(ENDPOINT)
    assert state.resource_name == next(iter(api.endpoints.values()))["name"]
    assert [(d.version.ref, d.traffic) for d in state.deployed] == [("summarizer@1", 100)]
    assert [e.name for e in registry.endpoints()] == [ENDPOINT]


@pytest.mark.parametrize("leave_deployed", [False, True])
def test_a_failed_deploy_operation_leaves_the_traffic_as_it_was(
    api: VertexStandIn, registry: VertexRegistry, leave_deployed: bool
) -> None:
    first, second = register(registry, 1, 37.0), register(registry, 2, 38.0)
    registry.deploy(first, ENDPOINT)
    (first_id,) = deployed_ids(api)
    before = api.endpoints[next(iter(api.endpoints))]["labels"]
    api.fail_next_deploy("Model server never became ready.", leave_deployed=leave_deployed)

    with pytest.raises(DeployError, match=r"never became ready.*serves what it served before"):
        registry.deploy(second, ENDPOINT, probe=["doc"])

    assert split(api) == {"1": 100}
    assert deployed_ids(api) == {first_id: "1"}
    assert api.endpoints[next(iter(api.endpoints))]["labels"] == before
    undeploys = api.find("POST endpoints:undeployModel")
    if leave_deployed:  # the half-deployed model is taken off, the old split restored
        (undeploy,) = undeploys
        assert undeploy.body["trafficSplit"] == {first_id: 100}
        assert undeploy.body["deployedModelId"] != first_id
    else:
        assert undeploys == []
    assert not api.find("POST endpoints:predict")[1:]
    assert registry.served_version(ENDPOINT) == first


@pytest.mark.parametrize(("mode", "message"), [("error", "500"), ("empty", "1 of them empty")])
def test_a_failed_probe_undeploys_the_new_version_with_the_old_split(
    api: VertexStandIn, registry: VertexRegistry, mode: str, message: str
) -> None:
    first, second = register(registry, 1, 37.0), register(registry, 2, 38.0)
    registry.deploy(first, ENDPOINT)
    (first_id,) = deployed_ids(api)
    api.fail_predictions(mode)

    with pytest.raises(DeployError, match=message):
        registry.deploy(second, ENDPOINT, probe=["doc"])

    (undeploy,) = api.find("POST endpoints:undeployModel")
    assert undeploy.body["deployedModelId"] != first_id
    assert undeploy.body["trafficSplit"] == {first_id: 100}
    assert split(api) == {"1": 100} and deployed_ids(api) == {first_id: "1"}
    assert registry.served_version(ENDPOINT) == first


def test_canary_keeps_the_served_version_and_rollback_takes_it_off(
    api: VertexStandIn, registry: VertexRegistry
) -> None:
    first, second = register(registry, 1, 37.0), register(registry, 2, 38.0)
    registry.deploy(first, ENDPOINT)
    (first_id,) = deployed_ids(api)

    outcome = registry.deploy(second, ENDPOINT, traffic_percent=10, probe=["doc"])
    assert api.find("POST endpoints:deployModel")[1].body["trafficSplit"] == {
        "0": 10,
        first_id: 90,
    }
    assert api.find("POST endpoints:undeployModel") == []
    assert split(api) == {"1": 90, "2": 10}
    assert outcome.previous == first and outcome.retired == ()
    assert registry.served_version(ENDPOINT) == first  # most traffic

    rolled = registry.rollback(ENDPOINT)
    assert (rolled.moved_from, rolled.moved_to) == (second, first)
    (patch,) = [c for c in api.find("PATCH endpoints") if "trafficSplit" in c.query["updateMask"]]
    assert patch.body["trafficSplit"] == {first_id: 100}
    (undeploy,) = api.find("POST endpoints:undeployModel")
    assert order(api, "PATCH endpoints", "POST endpoints:undeployModel")[-1] == (
        "POST endpoints:undeployModel"
    )
    assert undeploy.body["deployedModelId"] != first_id
    assert split(api) == {"1": 100} and list(deployed_ids(api)) == [first_id]
    with pytest.raises(RegistryError, match="no earlier version"):
        registry.rollback(ENDPOINT)


def test_a_second_canary_replaces_the_first_and_promoting_it_reroutes(
    api: VertexStandIn, registry: VertexRegistry
) -> None:
    first, second, third = (register(registry, n, 37.0 + n) for n in (1, 2, 3))
    registry.deploy(first, ENDPOINT)
    (first_id,) = deployed_ids(api)
    registry.deploy(second, ENDPOINT, traffic_percent=10)

    outcome = registry.deploy(third, ENDPOINT, traffic_percent=20, probe=["doc"])
    assert api.find("POST endpoints:deployModel")[2].body["trafficSplit"] == {
        "0": 20,
        first_id: 80,
    }
    assert outcome.retired == (second,)  # undeployed once it had no traffic
    assert split(api) == {"1": 80, "3": 20}

    deploys = len(api.find("POST endpoints:deployModel"))
    outcome = registry.deploy(third, ENDPOINT, probe=["doc"])
    assert len(api.find("POST endpoints:deployModel")) == deploys  # already up: re-routed
    (third_id,) = [k for k, v in deployed_ids(api).items() if v == "3"]
    patch = api.find("PATCH endpoints")[-1]
    assert patch.query["updateMask"] == ["trafficSplit"]
    assert patch.body["trafficSplit"] == {third_id: 100}
    assert order(api, "PATCH endpoints", "POST endpoints:predict", "POST endpoints:undeployModel")[
        -3:
    ] == ["PATCH endpoints", "POST endpoints:predict", "POST endpoints:undeployModel"]
    assert outcome.previous == first and outcome.retired == (first,)
    assert split(api) == {"3": 100}


def test_rollback_redeploys_the_previous_version_and_twice_returns(
    api: VertexStandIn, registry: VertexRegistry
) -> None:
    first, second = register(registry, 1, 37.0), register(registry, 2, 38.0)
    registry.deploy(first, ENDPOINT)
    registry.deploy(second, ENDPOINT)
    labels = next(iter(api.endpoints.values()))["labels"]
    assert labels["previous_model"] == model_of(first).rsplit("/", 1)[1]
    assert labels["previous_version"] == "1"
    calls = len(api.calls)

    rolled = registry.rollback(ENDPOINT)
    assert (rolled.moved_from, rolled.moved_to) == (second, first)
    done = [c for c in api.calls[calls:] if c.method != "GET"]
    assert [c.verb for c in done] == [
        "POST endpoints:deployModel",
        "POST endpoints:predict",
        "PATCH endpoints",
        "POST endpoints:undeployModel",
        "POST models:mergeVersionAliases",
    ]
    assert done[0].body["deployedModel"]["model"] == first.resource_name
    assert done[0].body["trafficSplit"] == {"0": 100}
    assert registry.served_version(ENDPOINT) == first

    again = registry.rollback(ENDPOINT)
    assert (again.moved_from, again.moved_to) == (first, second)
    assert registry.served_version(ENDPOINT) == second


def test_rollback_needs_a_recorded_version(api: VertexStandIn, registry: VertexRegistry) -> None:
    with pytest.raises(RegistryError, match="does not exist"):
        registry.rollback(ENDPOINT)
    registry.deploy(register(registry, 1, 37.0), ENDPOINT)
    with pytest.raises(RegistryError, match="records no earlier version"):
        registry.rollback(ENDPOINT)


def test_a_first_canary_takes_all_the_traffic(api: VertexStandIn, registry: VertexRegistry) -> None:
    outcome = registry.deploy(register(registry, 1, 37.0), ENDPOINT, traffic_percent=10)
    assert [d.traffic for d in outcome.endpoint.deployed] == [100]
    (deploy_call,) = [c for c in api.calls if c.path.endswith(":deployModel")]
    assert deploy_call.body["trafficSplit"] == {"0": 100}


def test_two_endpoints_with_one_name_are_an_error_naming_both(
    api: VertexStandIn, registry: VertexRegistry
) -> None:
    from google.cloud import aiplatform

    for _ in range(2):
        aiplatform.Endpoint.create(display_name=ENDPOINT)
    with pytest.raises(RegistryError, match="2 endpoints are called") as error:
        registry.endpoint(ENDPOINT)
    for endpoint in api.endpoints.values():
        assert endpoint["name"] in str(error.value)


def test_api_errors_are_user_errors_naming_the_resource(
    api: VertexStandIn, registry: VertexRegistry
) -> None:
    ghost = ModelVersion("summarizer", "7", "gs://b/m", resource_name=f"{PARENT}/models/99@7")
    with pytest.raises(DeployError, match=f"{PARENT}/models/99@7.*404") as error:
        registry.deploy(ghost, ENDPOINT)
    assert isinstance(error.value, UserError)
    assert error.value.__cause__ is None and error.value.__suppress_context__
