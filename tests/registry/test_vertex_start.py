"""`model.source: "registry:..."` against Vertex AI Model Registry: the real aiplatform SDK
talking to the REST stand-in, checked request by request (a version is `models.get` of
`.../models/ID@VERSION`; `@serving` reads the endpoints), and the start recorded in the
new version's labels as Vertex allows them."""

from __future__ import annotations

import pytest

from llm_pipeline.config import PipelineConfig
from llm_pipeline.registry import RegistryError
from llm_pipeline.registry.start import resolve_start
from llm_pipeline.registry.vertex.registry import VertexRegistry

from .test_vertex import PARENT, api, make_registry  # noqa: F401 (api is a fixture)
from .vertex_standin import VertexStandIn

pytest.importorskip("google.cloud.aiplatform", reason="the vertex extra is not installed")

SFT = "Docstrings-SFT"


@pytest.fixture
def registry(api: VertexStandIn) -> VertexRegistry:  # noqa: F811
    """Versions 1 and 2 of the SFT model; its endpoint serves version 2."""
    found = make_registry(api)
    for number in (1, 2):
        found.register(model=SFT, model_dir=f"gs://bucket/sft/{number}/model", metrics={})
    found.deploy(found.versions(SFT)[1], "sft-endpoint", probe=["A docstring."])
    api.calls.clear()
    return found


def config_for(source: str) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "task": "instruction_tuning",
            "data": {"dataset": "builtin:docstrings"},
            "model": {"source": source},
            "deploy": {"target": "vertex", "model_display_name": "docstrings-dpo"},
        }
    )


def test_a_version_is_read_by_its_resource_name_at_that_version(
    api: VertexStandIn,  # noqa: F811
    registry: VertexRegistry,
) -> None:
    started = resolve_start(config_for(f"registry:{SFT}@1"), registry)
    assert started.model.source == "gs://bucket/sft/1/model"
    assert started.model.started_from == f"{SFT}@1"
    (model_id,) = api.models
    # The parent model found by display name, then that one version read by name.
    lookup, get = [(c.method, c.path, c.query.get("filter")) for c in api.calls]
    assert lookup == ("GET", f"/v1/{PARENT}/models", [f'display_name="{SFT}"'])
    assert get == ("GET", f"/v1/{PARENT}/models/{model_id}@1", None)


def test_serving_is_the_version_an_endpoint_serves(
    api: VertexStandIn,  # noqa: F811
    registry: VertexRegistry,
) -> None:
    started = resolve_start(config_for(f"registry:{SFT}@serving"), registry)
    assert started.model.source == "gs://bucket/sft/2/model"
    assert started.model.started_from == f"{SFT}@2"
    assert api.find("GET endpoints")  # endpoints listed, the deployed model read by version
    (model_id,) = api.models
    assert any(c.path == f"/v1/{PARENT}/models/{model_id}@2" for c in api.calls)


def test_a_missing_version_or_model_names_what_the_registry_has(
    registry: VertexRegistry,
) -> None:
    with pytest.raises(RegistryError) as caught:
        resolve_start(config_for(f"registry:{SFT}@5"), registry)
    assert str(caught.value) == (
        f"model.source 'registry:{SFT}@5' (Vertex AI Model Registry (test-project, "
        f"us-central1)): {SFT} has no version '5'; its versions: 1, 2"
    )
    with pytest.raises(RegistryError, match=rf"no model named 'sft' in .*models: {SFT}"):
        resolve_start(config_for("registry:sft@1"), registry)


def test_the_start_is_recorded_in_labels_vertex_accepts(
    api: VertexStandIn,  # noqa: F811
    registry: VertexRegistry,
) -> None:
    labels = registry.start_labels(f"{SFT}@2")
    assert labels == {"started_from": "docstrings-sft", "started_from_version": "2"}
    version = registry.register(
        model="docstrings-dpo", model_dir="gs://bucket/dpo/model", metrics={}, labels=labels
    )
    (upload,) = api.find("POST models:upload")
    assert upload.body["model"]["labels"] == labels
    assert version.started_from == "docstrings-sft@2"
