"""Reading Vertex AI resources into the registry's dataclasses, and API errors into messages.

Shared by `VertexRegistry` and the traffic moves in `vertex_endpoints`. Every SDK object is
typed `Any`: `google-cloud-aiplatform` is an optional extra, imported only where it is used.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from datetime import UTC
from typing import Any

from llm_pipeline.errors import UserError
from llm_pipeline.registry.base import (
    Deployed,
    EndpointState,
    ModelVersion,
    RegistryError,
    RegistryUnreachable,
)
from llm_pipeline.registry.vertex.version_labels import decode_version_labels


@contextlib.contextmanager
def api_errors(action: str, error: type[UserError] = RegistryError) -> Iterator[None]:
    """Turn what the SDK raises for a failed call into `error` naming `action`.

    These are the user's to fix (permissions, quotas, a wrong name, a model server that
    does not start), so they carry one message instead of a traceback.
    """
    import requests
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions

    # Not asked at all (a registry error that is not the registry's answer): said apart.
    unreachable = RegistryUnreachable if error is RegistryError else error
    try:
        yield
    except exceptions.GoogleAPIError as exc:
        raise error(f"Vertex AI: {action} failed: {exc}") from None
    except auth_exceptions.DefaultCredentialsError as exc:
        raise unreachable(
            f"Vertex AI: {action} needs Google Cloud credentials: run `gcloud auth "
            f"application-default login` or set GOOGLE_APPLICATION_CREDENTIALS ({exc})"
        ) from None
    except (auth_exceptions.GoogleAuthError, requests.RequestException) as exc:
        raise unreachable(f"Vertex AI: {action} failed: {exc}") from None


def gcs_uri(model_dir: str) -> str:
    """`model_dir` as the `gs://` URI Vertex reads the model from (`/gcs/B/K` → `gs://B/K`)."""
    for prefix in ("gs://", "/gcs/"):
        rest = model_dir[len(prefix) :].rstrip("/") if model_dir.startswith(prefix) else ""
        if rest and not rest.startswith("/"):
            return "gs://" + rest
    raise RegistryError(
        f"model folder {model_dir!r}: Vertex AI serves models from Cloud Storage, so it must "
        "be a gs://BUCKET/... URI (or Vertex's /gcs/BUCKET/... mount of one)"
    )


def by_name(name: str) -> str:
    """A list filter for one display name (quoted and escaped as the filter syntax wants)."""
    return f"display_name={json.dumps(name)}"


def only_one(kind: str, name: str, found: Sequence[Any], names: Sequence[str]) -> Any:
    """The one resource called `name`, None for none; RegistryError naming them for more."""
    if len(found) > 1:
        raise RegistryError(
            f"{len(found)} {kind} are called {name!r} ({', '.join(names)}); give all but "
            "one a different display name so the pipeline knows which to use"
        )
    return found[0] if found else None


def find_model(aip: Any, name: str) -> Any:
    """The parent model called `name` (the Model resource of its default version), or None."""
    with api_errors(f"looking up model {name!r}"):
        found = [m.gca_resource for m in aip.Model.list(filter=by_name(name))]
    return only_one("models", name, found, [m.name for m in found])


def find_endpoint(aip: Any, name: str) -> Any:
    """The SDK endpoint called `name` in the configured region, or None."""
    with api_errors(f"looking up endpoint {name!r}"):
        found = aip.Endpoint.list(filter=by_name(name))
    return only_one("endpoints", name, found, [e.resource_name for e in found])


def version_from_model(model: Any) -> ModelVersion:
    """A ModelVersion from a Model resource (one version of it): metrics from its labels."""
    decoded = decode_version_labels(dict(model.labels))
    created = model.version_create_time or model.create_time
    name = model.name.partition("@")[0]
    spec = model.container_spec
    return ModelVersion(
        model=model.display_name,
        version=model.version_id,
        uri=model.artifact_uri,
        metrics=decoded.metrics,
        labels=decoded.labels,
        created=created.astimezone(UTC).isoformat() if created else "",
        run=decoded.run,
        resource_name=f"{name}@{model.version_id}",
        serving_env={e.name: e.value for e in spec.env} if spec else {},
    )


def get_version(aip: Any, model: str, version: str) -> ModelVersion:
    """Version `version` of `model` (a resource name or id), read from the registry."""
    with api_errors(f"reading model version {model}@{version}"):
        return version_from_model(aip.Model(model_name=model, version=version).gca_resource)


def endpoint_state(aip: Any, endpoint: Any) -> EndpointState:
    """What `endpoint` serves: each deployed model's version and its share of traffic."""
    resource = endpoint.gca_resource
    split = dict(resource.traffic_split)
    deployed = tuple(
        Deployed(
            version=get_version(aip, m.model, m.model_version_id),
            traffic=int(split.get(m.id, 0)),
            deployed_id=m.id,
        )
        for m in resource.deployed_models
    )
    return EndpointState(name=resource.display_name, deployed=deployed, resource_name=resource.name)


def deployed_as(state: EndpointState, resource_name: str) -> Deployed | None:
    """The deployed model serving `resource_name` (`.../models/ID@VERSION`), if any."""
    return next((d for d in state.deployed if d.version.resource_name == resource_name), None)
