"""A saved classifier (a model with a sequence-classification head) loaded for inference,
and its label scores for token ids, a batch at a time.

A classification forward pass reads the whole input once: no generation. Scores are
probabilities: a softmax over the labels, or a sigmoid per label for a multi-label head
(`problem_type` "multi_label_classification"), computed in fp32 whatever the model's dtype.
Batches are right-padded; a decoder's head reads the last non-pad token, so a decoder needs
its pad token id set (`ensure_pad_token`, then `config.pad_token_id`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from llm_pipeline.config import ModelConfig
from llm_pipeline.errors import UserError
from llm_pipeline.models.errors import ModelError, ModelLoadError
from llm_pipeline.models.generation import (
    _check_weights,
    default_device,
    inference_dtype,
    longest_first,
    pad_right,
    read_saved_config,
)
from llm_pipeline.models.loading import SAFE_WEIGHTS
from llm_pipeline.models.sources import ensure_pad_token

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "MULTI_LABEL",
    "build_classifier",
    "is_multi_label",
    "label_probabilities",
    "load_classifier",
    "set_pad_token_id",
]

#: transformers' `problem_type` of a head scored by a sigmoid per label.
MULTI_LABEL = "multi_label_classification"
_EXPECTED = (
    "the finetune step's classifier folder (config.json with id2label, model.safetensors, "
    "tokenizer files)"
)


def is_multi_label(model: PreTrainedModel) -> bool:
    """Whether the model's head scores each label on its own (sigmoid) rather than one label
    among all (softmax)."""
    return getattr(model.config, "problem_type", None) == MULTI_LABEL


def load_classifier(
    model_dir: str | os.PathLike[str],
    *,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
    error: type[UserError] = ModelLoadError,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The classifier (eval mode, on `device`) and tokenizer saved in `model_dir`.

    `dtype` defaults to `inference_dtype(device)`. Raises `error` (a caller's own UserError,
    so its step reports it) for a folder that is not a consolidated classifier checkpoint.
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = Path(model_dir)
    _check_classifier(folder, error)
    _check_weights(folder, error)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        ensure_pad_token(tokenizer)
    except (OSError, ValueError) as exc:
        raise error(
            f"model folder {folder}: no usable tokenizer files ({exc}); expected {_EXPECTED}"
        ) from exc
    device = device or default_device()
    model = AutoModelForSequenceClassification.from_pretrained(
        folder, dtype=dtype or inference_dtype(device)
    )
    set_pad_token_id(model, tokenizer)
    # transformers wraps `to` in a decorator that mypy misreads; the call itself is plain.
    cast(Any, model).to(device)
    model.eval()
    return model, tokenizer


def set_pad_token_id(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Give the model's config the tokenizer's pad id where it has none: a decoder's head
    finds each row's last token by it, and cannot score a padded batch without it."""
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id


def build_classifier(
    model: ModelConfig, tokenizer: PreTrainedTokenizerBase, head: dict[str, Any]
) -> PreTrainedModel:
    """The classifier `model` describes before any fine-tuning: the pretrained `model.source`
    with a new head, or random weights in `model.architecture`'s shape. `head` holds the
    config fields the head takes (num_labels, id2label, label2id, problem_type: the label
    set's `model_config_fields()`); the caller seeds torch first, so the head's random
    initialisation is a chosen one.

    Raises ModelError naming the config key and why the model could not be built.
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from llm_pipeline.models.sources import is_hub_id, resolve_model_path

    try:
        if model.architecture is not None:
            settings = dict(model.architecture)
            model_type = settings.pop("model_type")
            settings = {"vocab_size": len(tokenizer), **settings, **head}
            config = AutoConfig.for_model(model_type, **settings)
            built = AutoModelForSequenceClassification.from_config(config)
        else:
            assert model.source is not None  # ModelConfig guarantees one source
            path = resolve_model_path(model.source)
            where = {
                "revision": model.revision if is_hub_id(model.source, path) else None,
                "trust_remote_code": model.trust_remote_code,
            }
            # The head's fields go into the config, not to from_pretrained: a field the config
            # class does not know (the threshold) would reach the model's constructor.
            config = AutoConfig.from_pretrained(path, **where)
            config.update(head)
            built = AutoModelForSequenceClassification.from_pretrained(
                path, config=config, **where, **SAFE_WEIGHTS
            )
    except Exception as exc:
        key = "model.architecture" if model.architecture is not None else "model.source"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{key}: could not build a classifier: {reason}") from exc
    set_pad_token_id(built, tokenizer)
    return built


def _check_classifier(folder: Path, error: type[UserError]) -> None:
    config = read_saved_config(folder, error, expected=_EXPECTED)
    architectures = getattr(config, "architectures", None) or []
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        kind = ", ".join(architectures) or str(config.model_type)
        raise error(
            f"model folder {folder} holds a {kind} model, not a classifier: labels need a "
            "model with a sequence-classification head; give the finetune step's output folder"
        )


def label_probabilities(
    model: PreTrainedModel,
    input_ids: Sequence[Sequence[int]],
    *,
    batch_size: int,
    pad_id: int,
    token_type_ids: Sequence[Sequence[int]] | None = None,
) -> list[list[float]]:
    """Each input's probability of each label (in id order), `batch_size` inputs per
    forward pass, in input order. `token_type_ids` (BERT's segment ids for text pairs) are
    passed when given."""
    device = next(model.parameters()).device
    sigmoid = is_multi_label(model)
    results: list[list[float]] = [[] for _ in input_ids]
    order = longest_first(input_ids)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            ids, mask = pad_right([input_ids[i] for i in rows], pad_id, device)
            inputs = {"input_ids": ids, "attention_mask": mask}
            if token_type_ids is not None:
                inputs["token_type_ids"], _ = pad_right(
                    [token_type_ids[i] for i in rows], 0, device
                )
            logits = cast(Any, model)(**inputs).logits.float()
            scores = logits.sigmoid() if sigmoid else logits.softmax(dim=-1)
            for i, row in zip(rows, scores.tolist(), strict=True):
                results[i] = row
    return results
