"""The registry on Vertex AI: Model Registry versions under one parent model, Endpoints.

* A registered version is a new version of the parent model found by display name (the
  first upload creates it), uploaded with `is_default_version=False`: the `default` alias
  moves to a version only once it serves, so `default` names what users get.
* Metrics live in the version's labels (`labels.py` says how); the model folder itself
  carries the resolved config it was trained with, so `config` is not copied into Vertex.
* An endpoint records in its labels what served before its last change
  (`vertex_endpoints.record_previous`); that is what `rollback` brings back.

`google-cloud-aiplatform` is an optional extra and slow to import: it is imported in the
methods, never at module level. Its settings (`aiplatform.init`) are process-wide, so each
call sets them again for this registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llm_pipeline.config.deploy import DeployConfig
from llm_pipeline.registry.base import (
    STARTED_FROM_LABEL,
    STARTED_FROM_VERSION_LABEL,
    DeployOutcome,
    EndpointState,
    ModelVersion,
    Registry,
    RegistryError,
    RollbackOutcome,
    ensure_still_served,
)
from llm_pipeline.registry.vertex.endpoints import (
    MANAGED,
    PREVIOUS_MODEL,
    PREVIOUS_VERSION,
    move_traffic,
    record_previous,
    recorded_previous,
    retire,
)
from llm_pipeline.registry.vertex.resources import (
    api_errors,
    deployed_as,
    endpoint_state,
    find_endpoint,
    find_model,
    gcs_uri,
    get_version,
    version_from_model,
)
from llm_pipeline.registry.vertex.version_labels import encode_version_labels, run_label

#: What a rollback sends the restored version before it takes traffic again.
ROLLBACK_PROBE = ("The endpoint rolls back to this version; this sentence checks it answers.",)
#: The prediction server's side of Vertex's custom container contract (serve/).
PREDICT_ROUTE, HEALTH_ROUTE, PORT = "/predict", "/health", 8080


class VertexRegistry(Registry):
    """Model versions in Vertex AI Model Registry; endpoints are Vertex AI Endpoints.

    `serving_image` is the prediction container every registered version runs (the
    config's `vertex.image_uri("serve")`); `api_endpoint` points the SDK elsewhere (REST
    transport), e.g. at a test stand-in; `rollback_probe` is what `rollback` asks the
    restored version before it serves.
    """

    def __init__(
        self,
        *,
        project: str,
        region: str,
        deploy: DeployConfig,
        serving_image: str,
        credentials: Any = None,
        api_endpoint: str | None = None,
        rollback_probe: Sequence[str] = ROLLBACK_PROBE,
    ) -> None:
        self.project, self.region, self.config = project, region, deploy
        self.serving_image = serving_image
        self._credentials, self._api_endpoint = credentials, api_endpoint
        self._rollback_probe = tuple(rollback_probe)
        self._sdk()  # a bad region fails here, not in the middle of a deploy

    @property
    def location(self) -> str:
        """The project and region, for messages."""
        return f"Vertex AI Model Registry ({self.project}, {self.region})"

    def _sdk(self) -> Any:
        """`aiplatform`, initialised for this registry."""
        from google.cloud import aiplatform

        extra: dict[str, Any] = {}
        if self._api_endpoint:
            extra = {"api_endpoint": self._api_endpoint, "api_transport": "rest"}
        try:
            aiplatform.init(
                project=self.project, location=self.region, credentials=self._credentials, **extra
            )
        except ValueError as exc:
            raise RegistryError(f"Vertex AI settings (vertex.region?): {exc}") from None
        return aiplatform

    # -- model versions -------------------------------------------------------------------

    def register(
        self,
        *,
        model: str,
        model_dir: str,
        metrics: Mapping[str, float],
        run: str | None = None,
        config: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        serving_env: Mapping[str, str] | None = None,
    ) -> ModelVersion:
        """Upload `model_dir` (gs://, or /gcs/ on Vertex) as a new, not yet default,
        version of `model`, with its metrics, run and `labels` as labels.

        `config` is not sent: the model folder holds the resolved config it was made with.
        """
        uri = gcs_uri(model_dir)
        version_labels = encode_version_labels(metrics, run=run, labels=labels)
        aip = self._sdk()
        parent = find_model(aip, model)
        with api_errors(f"uploading {uri} as a version of model {model!r}"):
            uploaded = aip.Model.upload(
                display_name=model,
                parent_model=parent.name.partition("@")[0] if parent else None,
                is_default_version=False,
                artifact_uri=uri,
                serving_container_image_uri=self.serving_image,
                serving_container_predict_route=PREDICT_ROUTE,
                serving_container_health_route=HEALTH_ROUTE,
                serving_container_ports=[PORT],
                serving_container_environment_variables=dict(serving_env or {}),
                # Vertex fails deployModel when the container is not healthy by then.
                serving_container_deployment_timeout=max(1, round(self.config.health_timeout_s)),
                labels=version_labels,
                version_description=f"llm-pipeline run {run}" if run else None,
                sync=True,
            )
        return version_from_model(uploaded.gca_resource)

    def start_labels(self, started_from: str) -> dict[str, str]:
        """The start as Vertex labels: the model's name as the run label writes names (lower
        case, other characters `-`), its version under a key of its own (no `@` allowed)."""
        model, _, version = started_from.rpartition("@")
        return {STARTED_FROM_LABEL: run_label(model), STARTED_FROM_VERSION_LABEL: version}

    def models(self) -> list[str]:
        """Display names of the registered models."""
        aip = self._sdk()
        with api_errors(f"listing models in {self.project}/{self.region}"):
            return sorted({m.display_name for m in aip.Model.list()})

    def versions(self, model: str) -> list[ModelVersion]:
        """Every version of `model`, oldest first; empty when no model has that name."""
        aip = self._sdk()
        parent = find_model(aip, model)
        if parent is None:
            return []
        with api_errors(f"listing the versions of model {parent.name}"):
            client = aip.models.ModelRegistry(parent.name).client
            found = [version_from_model(m) for m in client.list_model_versions(name=parent.name)]
        return sorted(found, key=lambda v: int(v.version) if v.version.isdigit() else 0)

    def version(self, model: str, version: str) -> ModelVersion:
        """Version `version` of `model` (`models.get` of `.../models/ID@VERSION`);
        RegistryError naming the models, or the model's versions, when it has none such."""
        from google.api_core import exceptions

        aip = self._sdk()
        parent = find_model(aip, model)
        if parent is None:
            known = ", ".join(self.models()) or "none yet"
            raise RegistryError(f"no model named {model!r} in {self.location}; models: {known}")
        try:
            return get_version(aip, parent.name.partition("@")[0], version)
        except RegistryError as exc:
            if not isinstance(exc.__context__, exceptions.NotFound):
                raise
        listed = ", ".join(v.version for v in self.versions(model)) or "none"
        raise RegistryError(f"{model} has no version {version!r}; its versions: {listed}")

    # -- endpoints ------------------------------------------------------------------------

    def endpoints(self) -> list[EndpointState]:
        """Every endpoint in the region and what it serves."""
        aip = self._sdk()
        with api_errors(f"listing endpoints in {self.project}/{self.region}"):
            found = aip.Endpoint.list()
        return [endpoint_state(aip, e) for e in found]

    def endpoint(self, name: str) -> EndpointState:
        """The endpoint called `name`; an empty state when there is none."""
        aip = self._sdk()
        found = find_endpoint(aip, name)
        return endpoint_state(aip, found) if found else EndpointState(name=name)

    def deploy(
        self,
        version: ModelVersion,
        endpoint: str,
        *,
        traffic_percent: int = 100,
        probe: Sequence[Any] = (),
        expect_served: str | None = None,
    ) -> DeployOutcome:
        """Deploy `version` to `endpoint` with `traffic_percent`, probe it, retire the rest.

        The deployModel request carries the new split ("0" is the new model), so traffic
        moves when Vertex reports the version healthy; the probe follows, and only then are
        the versions left without traffic undeployed. A failed deploy or probe undeploys the
        new version again with the old split (DeployError). The endpoint's labels record
        what served before; the `default` alias goes to the version that serves after.
        """
        if isinstance(traffic_percent, bool) or traffic_percent not in range(1, 101):
            raise RegistryError(
                f"traffic_percent must be an integer 1-100, got {traffic_percent!r}"
            )
        if bool(self.config.accelerator_type) != bool(self.config.accelerator_count):
            raise RegistryError(
                "deploy.accelerator_type and deploy.accelerator_count go together: set both "
                f"(got {self.config.accelerator_type!r} and {self.config.accelerator_count})"
            )
        aip = self._sdk()
        target = version.resource_name or self._resource_of(aip, version)
        found = find_endpoint(aip, endpoint)
        before = endpoint_state(aip, found) if found else EndpointState(endpoint)
        # Read just before deployModel, whose traffic split moves the traffic.
        ensure_still_served(before, expect_served)
        on = deployed_as(before, target)
        keep = EndpointState(endpoint, tuple(d for d in before.deployed if d is not on)).serving
        if keep is None:
            traffic_percent = 100  # a first deploy has nothing to share the traffic with
        if found is None:
            with api_errors(f"creating endpoint {endpoint!r}"):
                found = aip.Endpoint.create(display_name=endpoint, labels=dict(MANAGED))
        keep = keep if traffic_percent < 100 else None
        new_id, prediction = move_traffic(
            aip,
            found,
            model_name=target,
            deployed_id=on.deployed_id if on else None,
            keep=keep.deployed_id if keep else None,
            percent=traffic_percent,
            probe=probe,
            config=self.config,
        )
        previous = before.serving.version if before.serving else None
        if previous is None or previous.resource_name != target:
            record_previous(found, previous)
        stays = {new_id, keep.deployed_id if keep else new_id}
        gone = [d for d in before.deployed if d.deployed_id not in stays]
        retire(found, [d.deployed_id for d in gone])
        after = self._settle(aip, found)
        now = deployed_as(after, target)
        return DeployOutcome(
            endpoint=after,
            version=now.version if now else version,
            previous=previous,
            retired=tuple(d.version for d in gone),
            prediction=prediction,
        )

    def rollback(self, endpoint: str) -> RollbackOutcome:
        """Serve again, with all traffic, the version the endpoint records as served before.

        The version is deployed again when it is gone (re-routed to when it still runs
        beside a canary), probed with `rollback_probe`, and everything else undeployed.
        Rolling back twice returns to where it started; after a canary, rollback takes the
        canary off and a second one finds nothing to undo.
        """
        aip = self._sdk()
        found = find_endpoint(aip, endpoint)
        if found is None:
            raise RegistryError(f"endpoint {endpoint!r} does not exist: nothing to roll back")
        recorded = recorded_previous(found)
        if recorded is None:
            raise RegistryError(
                f"endpoint {endpoint!r} records no earlier version (labels {PREVIOUS_MODEL}, "
                f"{PREVIOUS_VERSION}): nothing to roll back to"
            )
        target = get_version(aip, *recorded)
        before = endpoint_state(aip, found)
        on = deployed_as(before, target.resource_name or "")
        others = sorted((d for d in before.deployed if d is not on), key=lambda d: -d.traffic)
        if not others:
            raise RegistryError(
                f"endpoint {endpoint!r} has no earlier version to roll back to: it serves only "
                f"{target.ref}, as it did before its last change"
            )
        new_id, _ = move_traffic(
            aip,
            found,
            model_name=target.resource_name or "",
            deployed_id=on.deployed_id if on else None,
            keep=None,
            percent=100,
            probe=self._rollback_probe,
            config=self.config,
        )
        if before.serving:
            record_previous(found, before.serving.version)
        retire(found, [d.deployed_id for d in others if d.deployed_id != new_id])
        after = self._settle(aip, found)
        return RollbackOutcome(endpoint=after, moved_from=others[0].version, moved_to=target)

    def undeploy_all(self, endpoint: str) -> tuple[ModelVersion, ...]:
        """Undeploy every model from `endpoint`, which stays, serving nothing (and billing
        for no machine); the versions it served. Nothing to do when it does not exist."""
        aip = self._sdk()
        found = find_endpoint(aip, endpoint)
        if found is None:
            return ()
        before = endpoint_state(aip, found)
        with api_errors(f"undeploying every model from endpoint {endpoint!r}"):
            found.undeploy_all()
        return tuple(d.version for d in before.deployed)

    def _resource_of(self, aip: Any, version: ModelVersion) -> str:
        """`.../models/ID@VERSION` for a version known only by model name and number."""
        parent = find_model(aip, version.model)
        if parent is None:
            raise RegistryError(f"model {version.model!r} is not in the Vertex AI Model Registry")
        return f"{parent.name.partition('@')[0]}@{version.version}"

    def _settle(self, aip: Any, endpoint: Any) -> EndpointState:
        """The endpoint after a change, with the `default` alias on the version it serves."""
        with api_errors(f"reading endpoint {endpoint.display_name}"):
            state = endpoint_state(aip, aip.Endpoint(endpoint.resource_name))
        if state.serving:
            model, _, number = (state.serving.version.resource_name or "").partition("@")
            with api_errors(f"making {state.serving.version.ref} the default version"):
                aip.models.ModelRegistry(model).add_version_aliases(["default"], version=number)
        return state
