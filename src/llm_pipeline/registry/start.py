"""Starting a run from a registered version: `model.source: "registry:<model>@<version>"`.

SFT → DPO is two configs: the second starts from the version the first registered, or from
the one an endpoint serves (`@serving`). The registry is the one `deploy.target` names, as
deploy uses it (`deploy.registry_dir`'s folder, or Vertex AI Model Registry). The source
is resolved once per run, by the configure step (and by the fit check before a run), into
the version's files (a folder, or its `gs://` artifact URI); every later step loads from
there and `model.started_from` carries `model@version` to the trained model's record.
"""

from __future__ import annotations

from llm_pipeline.config import PipelineConfig
from llm_pipeline.config.model import RegistryRef, registry_ref
from llm_pipeline.registry import open_registry
from llm_pipeline.registry.base import ModelVersion, Registry, RegistryError, ensure_files


def resolve_start(config: PipelineConfig, registry: Registry | None = None) -> PipelineConfig:
    """`config` with a `registry:` model.source replaced by its version's files and
    `model.started_from` set to `model@version`; any other config unchanged. `registry`
    defaults to the one `config.deploy` names. RegistryError (`model.source ...: ...`)
    naming the registry and what it holds when the model or version is not there."""
    ref = registry_ref(config.model.source or "")
    if ref is None:
        return config
    where = ""
    try:
        found = registry or open_registry(config.deploy, config.vertex)
        where = f" ({found.location})"
        start = starting_version(found, ref)
    except RegistryError as exc:
        # The same class: a registry that could not be asked stays told apart.
        raise type(exc)(f"model.source {str(ref)!r}{where}: {exc}") from None
    model = config.model.model_copy(update={"source": start.uri, "started_from": start.ref})
    return config.model_copy(update={"model": model})


def starting_version(registry: Registry, ref: RegistryRef) -> ModelVersion:
    """The version `ref` names: by number, or the one the model's endpoint serves; a
    RegistryError when its files are gone (pruned, or deleted by hand)."""
    if not ref.serving:
        found = registry.version(ref.model, ref.version)
    else:
        found = served_version_of(registry, ref.model)
    return ensure_files(found, "start a run from")


def served_version_of(registry: Registry, model: str) -> ModelVersion:
    """The version of `model` that its endpoint serves (most traffic). Endpoints are found
    by what they serve, not by name: the first run's `deploy.endpoint_display_name` is not
    in the second's config. RegistryError when none serves one, or when endpoints serve
    different versions (which one is meant is then the user's to say)."""
    versions = registry.versions(model)
    if not versions:
        known = ", ".join(registry.models()) or "none yet"
        raise RegistryError(f"no model named {model!r}; models: {known}")
    endpoints = registry.endpoints()
    serving = {
        state.name: state.serving.version
        for state in endpoints
        if state.serving is not None and state.serving.version.model == model
    }
    refs = sorted({version.ref for version in serving.values()})
    if len(refs) == 1:
        return next(iter(serving.values()))
    listed = ", ".join(v.version for v in versions)
    if not refs:
        served = [
            f"{state.name} serves {state.serving.version.ref if state.serving else 'nothing'}"
            for state in endpoints
        ]
        raise RegistryError(
            f"no endpoint serves a version of {model!r} (its versions: "
            f"{listed}; endpoints: {'; '.join(served) or 'none'}): name a version instead"
        )
    which = ", ".join(f"{name} serves {version.ref}" for name, version in sorted(serving.items()))
    raise RegistryError(
        f"endpoints serve different versions of {model!r} ({which}): name the version "
        f"(registry:{model}@<version>, one of {listed})"
    )
