"""The stand-in's resources: models with versions and aliases, endpoints with deployed
models, traffic and predictions, checked as the v1 REST API checks them. See
`vertex_standin.py`."""

from __future__ import annotations

import re
from typing import Any

from .vertex_standin_base import (
    ALIAS,
    ENV_NAME,
    NO_ACCELERATOR,
    TYPE,
    ApiError,
    StandInState,
    check_labels,
    check_split,
    name_filter,
    require,
)


class ModelsApi(StandInState):
    """models:upload, get, list, :listVersions, :mergeVersionAliases."""

    def _upload(self, *, query: dict, body: Any) -> dict:
        model = body.get("model")
        require(isinstance(model, dict), "model is required")
        require(model.get("displayName"), "model.display_name is required")
        require(len(model["displayName"]) <= 128, "model.display_name is longer than 128")
        spec = model.get("containerSpec")
        require(
            isinstance(spec, dict) and spec.get("imageUri"),
            "model.container_spec.image_uri is required for a custom container model",
        )
        for route in ("predictRoute", "healthRoute"):
            require(str(spec.get(route, "/")).startswith("/"), f"{route} must start with /")
        for port in spec.get("ports", []):
            require(1 <= int(port.get("containerPort", 0)) <= 65535, f"bad port {port}")
        for env in spec.get("env", []):
            require(ENV_NAME.fullmatch(env.get("name", "")), f"bad env var name {env}")
        uri = model.get("artifactUri", "")
        require(not uri or uri.startswith("gs://"), f"artifact_uri {uri!r} must be on gs://")
        check_labels(model.get("labels", {}))
        aliases = model.get("versionAliases", [])
        for alias in aliases:
            require(ALIAS.fullmatch(alias), f"invalid version alias {alias!r}")
        parent_model = body.get("parentModel")
        if parent_model:
            model_id = self._model_id(parent_model)
            require(model_id in self.models, f"parent model {parent_model} not found", 404)
        else:
            model_id = body.get("modelId") or self._next_id()
            require(model_id not in self.models, f"model {model_id} exists", 409)
        resource = f"{self.parent}/models/{model_id}"

        def finish() -> dict:
            versions = self.models.setdefault(model_id, {})
            number = str(len(versions) + 1)
            first = next(iter(versions.values()), None)
            stored = {
                **model,
                "name": resource,
                "versionId": number,
                "versionAliases": list(aliases) + ([] if versions else ["default"]),
                "createTime": first["createTime"] if first else self._now(),
                "updateTime": self._now(),
                "versionCreateTime": self._now(),
                "versionUpdateTime": self._now(),
                "supportedDeploymentResourcesTypes": ["DEDICATED_RESOURCES"],
            }
            versions[number] = stored
            if "default" in aliases:
                self._move_alias(model_id, number, "default")
            return {
                "@type": f"{TYPE}UploadModelResponse",
                "model": resource,
                "modelVersionId": number,
            }

        return self._operation(resource, "UploadModel", finish)

    def _list_models(self, *, query: dict, body: Any) -> dict:
        name = name_filter(query)
        found = [self._version(m, None) for m in self.models]
        return {"models": [m for m in found if name is None or m["displayName"] == name]}

    def _get_model(self, model_id: str, version: str | None, *, query: dict, body: Any) -> dict:
        return self._version(model_id, version)

    def _list_versions(self, model_id: str, *, query: dict, body: Any) -> dict:
        require(not query.get("filter"), "this stand-in does not filter versions")
        self._version(model_id, None)
        return {
            "models": [self.models[model_id][v] for v in sorted(self.models[model_id], key=int)]
        }

    def _merge_aliases(self, model_id: str, version: str, *, query: dict, body: Any) -> dict:
        target = self._version(model_id, version)
        aliases = body.get("versionAliases")
        require(isinstance(aliases, list) and aliases, "version_aliases is required")
        for alias in aliases:
            bare = alias.removeprefix("-")
            require(ALIAS.fullmatch(bare), f"invalid version alias {alias!r}")
            require(alias != "-default", "the default alias cannot be removed")
            if alias.startswith("-"):
                target["versionAliases"] = [a for a in target["versionAliases"] if a != bare]
            else:
                self._move_alias(model_id, target["versionId"], bare)
        return target

    def _move_alias(self, model_id: str, number: str, alias: str) -> None:
        for version in self.models[model_id].values():
            others = [a for a in version["versionAliases"] if a != alias]
            version["versionAliases"] = others + ([alias] if version["versionId"] == number else [])

    def _version(self, model_id: str, version: str | None) -> dict:
        versions = self.models.get(model_id)
        require(versions, f"model {self.parent}/models/{model_id} not found", 404)
        assert versions is not None
        wanted = version or "default"
        for stored in versions.values():
            if wanted in (stored["versionId"], *stored["versionAliases"]):
                return stored
        raise ApiError(404, f"model {model_id}@{wanted} not found")

    def _model_id(self, name: str) -> str:
        match = re.fullmatch(rf"{re.escape(self.parent)}/models/([^/@]+)", name)
        require(match, f"{name!r} is not a model resource name in {self.parent}")
        assert match is not None
        return match.group(1)


class EndpointsApi(StandInState):
    """endpoints create, get, list, patch, :deployModel, :undeployModel, :predict."""

    def _create_endpoint(self, *, query: dict, body: Any) -> dict:
        require(body.get("displayName"), "endpoint.display_name is required")
        check_labels(body.get("labels", {}))
        endpoint_id = (query.get("endpointId") or [self._next_id()])[0]
        require(endpoint_id not in self.endpoints, f"endpoint {endpoint_id} exists", 409)
        resource = f"{self.parent}/endpoints/{endpoint_id}"

        def finish() -> dict:
            self.endpoints[endpoint_id] = {
                "name": resource,
                "displayName": body["displayName"],
                "labels": body.get("labels", {}),
                "deployedModels": [],
                "trafficSplit": {},
                "createTime": self._now(),
                "updateTime": self._now(),
            }
            return {"@type": f"{TYPE}Endpoint", **self.endpoints[endpoint_id]}

        return self._operation(resource, "CreateEndpoint", finish)

    def _list_endpoints(self, *, query: dict, body: Any) -> dict:
        name = name_filter(query)
        found = [e for e in self.endpoints.values() if name is None or e["displayName"] == name]
        return {"endpoints": found}

    def _get_endpoint(self, endpoint_id: str, *, query: dict, body: Any) -> dict:
        require(endpoint_id in self.endpoints, f"endpoint {endpoint_id} not found", 404)
        return self.endpoints[endpoint_id]

    def _patch_endpoint(self, endpoint_id: str, *, query: dict, body: Any) -> dict:
        endpoint = self._get_endpoint(endpoint_id, query=query, body=body)
        mask = [p for m in query.get("updateMask", []) for p in m.split(",") if p]
        require(mask, "update_mask is required")
        fields = {
            "labels": "labels",
            "traffic_split": "trafficSplit",
            "trafficSplit": "trafficSplit",
            "display_name": "displayName",
            "displayName": "displayName",
            "description": "description",
        }
        for path in mask:
            require(path in fields, f"update_mask path {path!r} is not updatable")
        changes = {fields[p]: body.get(fields[p]) for p in mask}
        if "labels" in changes:
            check_labels(changes["labels"] or {})
        if "trafficSplit" in changes:
            split = changes["trafficSplit"] or {}
            check_split(endpoint, split, allow_new=False)
        endpoint.update({k: v if v is not None else {} for k, v in changes.items()})
        endpoint["updateTime"] = self._now()
        return endpoint

    def _deploy(self, endpoint_id: str, *, query: dict, body: Any) -> dict:
        endpoint = self._get_endpoint(endpoint_id, query=query, body=body)
        deployed = body.get("deployedModel")
        require(
            isinstance(deployed, dict) and deployed.get("model"), "deployed_model.model is required"
        )
        model_name, _, version = deployed["model"].partition("@")
        model = self._version(self._model_id(model_name), version or None)
        require(
            not deployed.get("automaticResources"),
            f"model {model_name} does not support automatic resources",
        )
        resources = deployed.get("dedicatedResources")
        require(
            isinstance(resources, dict),
            "deployed_model.dedicated_resources is required "
            "(the model supports DEDICATED_RESOURCES only)",
        )
        spec = resources.get("machineSpec") or {}
        require(
            spec.get("machineType"), "dedicated_resources.machine_spec.machine_type is required"
        )
        low, high = (
            int(resources.get("minReplicaCount", 0)),
            int(resources.get("maxReplicaCount", 0)),
        )
        require(low >= 1, "dedicated_resources.min_replica_count must be at least 1")
        require(high == 0 or high >= low, "max_replica_count must be >= min_replica_count")
        require(
            (spec.get("acceleratorType") in NO_ACCELERATOR)
            == (int(spec.get("acceleratorCount", 0)) == 0),
            "accelerator_type and accelerator_count must be set together",
        )
        split = body.get("trafficSplit") or {}
        check_split(endpoint, split, allow_new=True)
        failure: tuple[str, bool] | None = self._deploy_failure
        self._deploy_failure = None

        def finish() -> dict:
            if failure and not failure[1]:
                raise ApiError(400, failure[0])
            new_id = self._next_id()
            stored = {
                **deployed,
                "id": new_id,
                "model": model_name,
                "modelVersionId": model["versionId"],
                "createTime": self._now(),
            }
            stored.setdefault("displayName", model["displayName"])
            endpoint["deployedModels"].append(stored)
            if split:
                endpoint["trafficSplit"] = {new_id if k == "0" else k: v for k, v in split.items()}
            model.setdefault("deployedModels", []).append(
                {"endpoint": endpoint["name"], "deployedModelId": new_id}
            )
            if failure:
                raise ApiError(400, failure[0])
            return {"@type": f"{TYPE}DeployModelResponse", "deployedModel": stored}

        return self._operation(endpoint["name"], "DeployModel", finish)

    def _undeploy(self, endpoint_id: str, *, query: dict, body: Any) -> dict:
        endpoint = self._get_endpoint(endpoint_id, query=query, body=body)
        gone = body.get("deployedModelId")
        ids = [m["id"] for m in endpoint["deployedModels"]]
        require(gone in ids, f"deployed model {gone!r} is not on endpoint {endpoint_id}", 404)
        split = body.get("trafficSplit") or {}
        if split:
            check_split(endpoint, split, allow_new=False)
            require(not split.get(gone), f"traffic_split still gives {gone} traffic")
        else:
            require(
                len(ids) == 1 or not endpoint["trafficSplit"].get(gone),
                f"deployed model {gone} has traffic; move it first or pass traffic_split",
            )

        def finish() -> dict:
            endpoint["deployedModels"] = [m for m in endpoint["deployedModels"] if m["id"] != gone]
            new = split or endpoint["trafficSplit"]
            endpoint["trafficSplit"] = {k: v for k, v in new.items() if k != gone}
            if not endpoint["deployedModels"]:
                endpoint["trafficSplit"] = {}
            for versions in self.models.values():
                for model in versions.values():
                    refs = model.get("deployedModels", [])
                    model["deployedModels"] = [r for r in refs if r["deployedModelId"] != gone]
            return {"@type": f"{TYPE}UndeployModelResponse"}

        return self._operation(endpoint["name"], "UndeployModel", finish)

    def _predict(self, endpoint_id: str, *, query: dict, body: Any) -> dict:
        endpoint = self._get_endpoint(endpoint_id, query=query, body=body)
        instances = body.get("instances")
        require(isinstance(instances, list) and instances, "instances is required")
        live = [(v, k) for k, v in endpoint["trafficSplit"].items() if v > 0]
        require(live, f"endpoint {endpoint_id} has no deployed model with traffic")
        serving = max(live)[1]
        deployed = next(m for m in endpoint["deployedModels"] if m["id"] == serving)
        model = self._version(self._model_id(deployed["model"]), deployed["modelVersionId"])
        mode = self._predict_failures.pop(0) if self._predict_failures else None
        if mode == "error":
            raise ApiError(500, "the model server answered 500: CUDA out of memory")
        answers = ["" if mode == "empty" else self.answer(str(i), model) for i in instances]
        return {
            "predictions": answers,
            "deployedModelId": serving,
            "model": deployed["model"],
            "modelVersionId": model["versionId"],
            "modelDisplayName": model["displayName"],
        }
