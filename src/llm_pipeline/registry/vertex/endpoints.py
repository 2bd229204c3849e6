"""Moving an endpoint's traffic on Vertex AI without leaving it unhealthy.

`VertexRegistry` decides *what* should serve; this module does the risky step, *how*:
deploy (or re-route to) the version, ask it for predictions, and on any failure put the
endpoint back as it was before raising `DeployError`. It also keeps, in the endpoint's
labels, what served before each change, for `rollback`.

Vertex completes `deployModel` only once the container answers its health route, and the
traffic split in that request takes effect with it; the probe predictions then go through
the endpoint. With a canary the endpoint routes the probe by traffic like any request (v1
offers no per-deployed-model predict on a shared endpoint), so below 100% the probe may be
answered by the version that keeps the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llm_pipeline.config.deploy import DeployConfig
from llm_pipeline.registry.base import DeployError, ModelVersion, RegistryError, prediction_text
from llm_pipeline.registry.vertex.resources import api_errors

#: The key a deployModel request's trafficSplit uses for the model it deploys.
NEW_MODEL_KEY = "0"
#: Endpoint labels naming what served before the last change (model id, version id).
PREVIOUS_MODEL, PREVIOUS_VERSION = "previous_model", "previous_version"
#: On every endpoint the registry touches; also keeps its label map non-empty, since the
#: SDK's `Endpoint.update` skips an empty one and so could not clear the two above.
MANAGED = {"managed-by": "llm-pipeline"}


def plan_split(target: str, keep: str | None, percent: int) -> dict[str, int]:
    """The traffic split that gives `target` `percent` and `keep` (if any) the rest.

    `target` is a deployed model id, or `NEW_MODEL_KEY` for the model being deployed.
    Models not named get no traffic, so at 100% the older versions drop to 0% in the
    same request that brings the new one in.
    """
    if keep is None or percent >= 100:
        return {target: 100}
    return {target: percent, keep: 100 - percent}


def move_traffic(
    aip: Any,
    endpoint: Any,
    *,
    model_name: str,
    deployed_id: str | None,
    keep: str | None,
    percent: int,
    probe: Sequence[Any],
    config: DeployConfig,
) -> tuple[str, str]:
    """Give `model_name` `percent` of `endpoint`'s traffic, then check it with `probe`.

    `deployed_id` is the version's deployed model when it is on the endpoint already (a
    canary being promoted, a rollback to the version a canary ran beside): its traffic is
    re-routed instead of deploying it twice. Returns (deployed model id, first prediction).
    On failure the endpoint gets back the deployed models and traffic split it had, and
    DeployError says why.
    """
    before_ids = {m.id for m in endpoint.gca_resource.deployed_models}
    before_split = dict(endpoint.gca_resource.traffic_split)
    where = f"{model_name} on endpoint {endpoint.display_name}"
    try:
        if deployed_id is None:
            with api_errors(f"deploying {where}", DeployError):
                endpoint.deploy(
                    aip.Model(model_name=model_name),
                    traffic_split=plan_split(NEW_MODEL_KEY, keep, percent),
                    machine_type=config.machine_type,
                    accelerator_type=config.accelerator_type or None,
                    accelerator_count=config.accelerator_count or None,
                    min_replica_count=config.min_replica_count,
                    max_replica_count=config.max_replica_count,
                    sync=True,
                    deploy_request_timeout=config.health_timeout_s,
                )
            added = [m.id for m in endpoint.gca_resource.deployed_models if m.id not in before_ids]
            if len(added) != 1:
                raise DeployError(f"Vertex AI: deploying {where}: no new deployed model appeared")
            deployed_id = added[0]
        else:
            split = plan_split(deployed_id, keep, percent)
            if split != {k: v for k, v in before_split.items() if v}:
                with api_errors(f"moving traffic to {where}", DeployError):
                    endpoint.update(traffic_split=split)
        return deployed_id, ask(endpoint, probe, where, timeout=config.health_timeout_s)
    except DeployError as exc:
        raise DeployError(f"{exc}; {restore(aip, endpoint, before_ids, before_split)}") from None


def ask(endpoint: Any, probe: Sequence[Any], where: str, *, timeout: float) -> str:
    """Send the probe instances; every one must get an answer (`prediction_text`)."""
    if not probe:
        return ""
    with api_errors(f"probe prediction from {where}", DeployError):
        answer = endpoint.predict(instances=list(probe), timeout=timeout)
    texts = [prediction_text(p) for p in answer.predictions]
    empty = sum(not t.strip() for t in texts)
    if len(texts) != len(probe) or empty:
        raise DeployError(
            f"Vertex AI: {where} failed its check: {len(probe)} probe instances got "
            f"{len(texts)} predictions, {empty} of them empty"
        )
    return texts[0]


def restore(aip: Any, endpoint: Any, before_ids: set[str], before_split: Mapping[str, int]) -> str:
    """Put back the deployed models and traffic split the endpoint had; says what it did.

    A deployed model that appeared since is undeployed with the old split in the same
    request, so the versions that served before take their traffic back at once.
    """
    old_split = dict(before_split)
    try:
        with api_errors(f"restoring endpoint {endpoint.display_name}"):
            now = aip.Endpoint(endpoint.resource_name)
            added = [m.id for m in now.gca_resource.deployed_models if m.id not in before_ids]
            for deployed_id in added:
                now.undeploy(deployed_model_id=deployed_id, traffic_split=old_split or None)
            if old_split and dict(now.gca_resource.traffic_split) != old_split:
                now.update(traffic_split=old_split)
    except RegistryError as exc:
        return f"putting the endpoint back failed too, check it by hand: {exc}"
    return "the endpoint serves what it served before"


def retire(endpoint: Any, deployed_ids: Sequence[str]) -> None:
    """Undeploy models the new split left without traffic."""
    for deployed_id in deployed_ids:
        with api_errors(
            f"undeploying {deployed_id} from endpoint {endpoint.display_name} (the new "
            "version serves; undeploy the old one by hand)"
        ):
            endpoint.undeploy(deployed_model_id=deployed_id)


def record_previous(endpoint: Any, previous: ModelVersion | None) -> None:
    """Note in the endpoint's labels what served before this change (None: nothing).

    Label values cannot hold a resource name, so the model's id and the version id.
    """
    labels = {**dict(endpoint.gca_resource.labels), **MANAGED}
    for key in (PREVIOUS_MODEL, PREVIOUS_VERSION):
        labels.pop(key, None)
    if previous is not None:
        model, _, number = (previous.resource_name or "").partition("@")
        labels.update({PREVIOUS_MODEL: model.rsplit("/", 1)[-1], PREVIOUS_VERSION: number})
    if labels != dict(endpoint.gca_resource.labels):
        what = previous.ref if previous else "that nothing served before"
        with api_errors(f"recording {what} on endpoint {endpoint.display_name}"):
            endpoint.update(labels=labels)


def recorded_previous(endpoint: Any) -> tuple[str, str] | None:
    """(model id, version id) that `record_previous` noted on `endpoint`, if any."""
    labels = dict(endpoint.gca_resource.labels)
    model, number = labels.get(PREVIOUS_MODEL), labels.get(PREVIOUS_VERSION)
    return (model, number) if model and number else None
