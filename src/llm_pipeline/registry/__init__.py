"""Model registry, endpoints and the should-deploy gate.

One interface (`Registry`), two backends: `LocalRegistry`, a folder on this machine (the
default, `deploy.target: "local"`), and `VertexRegistry`, Vertex AI Model Registry and
Endpoints (`deploy.target: "vertex"`).
"""

from __future__ import annotations

from pathlib import Path

from llm_pipeline.config.deploy import DeployConfig
from llm_pipeline.config.vertex import VertexConfig
from llm_pipeline.registry.base import (
    EVALUATION_DATA_LABEL,
    STARTED_FROM_LABEL,
    Deployed,
    DeployError,
    DeployOutcome,
    EndpointState,
    ModelVersion,
    Registry,
    RegistryError,
    RegistryUnreachable,
    RollbackOutcome,
    VersionCheck,
    ensure_still_served,
    prediction_text,
)
from llm_pipeline.registry.gate import (
    Champion,
    Decision,
    GateError,
    Served,
    decide,
    served_scores,
)


def open_registry(
    deploy: DeployConfig,
    vertex: VertexConfig | None = None,
    *,
    check: VersionCheck | None = None,
    registry_dir: str | Path | None = None,
) -> Registry:
    """The registry `deploy.target` names.

    `check` brings a local version up before it takes traffic (Vertex checks on the
    endpoint itself); `registry_dir` overrides `deploy.registry_dir`.
    """
    if deploy.target == "local":
        from llm_pipeline.registry.local.registry import LocalRegistry

        return LocalRegistry(registry_dir or deploy.registry_dir, check=check)
    vertex = vertex or VertexConfig()
    if not vertex.project:
        raise RegistryUnreachable(
            'deploy.target is "vertex" but vertex.project is not set: set it in the config '
            "or with --set vertex.project=YOUR_PROJECT"
        )
    from llm_pipeline.registry.vertex.registry import VertexRegistry

    return VertexRegistry(
        project=vertex.project,
        region=vertex.region,
        deploy=deploy,
        # The CUDA server for a deploy with an accelerator, else the CPU one.
        serving_image=vertex.serving_image_uri(deploy.accelerator_type),
    )


__all__ = [
    "EVALUATION_DATA_LABEL",
    "STARTED_FROM_LABEL",
    "Champion",
    "Decision",
    "DeployError",
    "DeployOutcome",
    "Deployed",
    "EndpointState",
    "GateError",
    "ModelVersion",
    "Registry",
    "RegistryError",
    "RegistryUnreachable",
    "RollbackOutcome",
    "Served",
    "VersionCheck",
    "decide",
    "ensure_still_served",
    "open_registry",
    "prediction_text",
    "served_scores",
]
