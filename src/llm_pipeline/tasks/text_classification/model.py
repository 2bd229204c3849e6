"""Classifiers to fine-tune: an encoder (or a decoder) with a classification head.

The task's `build_model` comes here, with the label set's config fields
(`labels.LabelSet.model_config_fields`: `num_labels`, `id2label`, `label2id`,
`problem_type`, the multi-label threshold), which the built model's config carries from then
on, so a saved folder says its own labels. The network is transformers'
`AutoModelForSequenceClassification` of the checkpoint's or the architecture's model type:
an encoder (BERT, MiniLM, DistilBERT, RoBERTa, DeBERTa) pools its first token; a decoder
(Llama, GPT-2, OPT, Qwen) scores its last token that is not padding, which it finds by the
config's `pad_token_id`, so the config is given the tokenizer's (decoder tokenizers without
a pad token pad with their EOS, `sources.ensure_pad_token`).

A checkpoint without a head (a pretrained encoder) gets a fresh one. So does one that was
fine-tuned as a classifier of other labels: its head scores those, not these, and is started
again (said in a log line) rather than silently reused; the same labels keep their head.

Loaded for inference (`load_classifier`), a forward pass reads the whole input once, no
generation: `label_probabilities` gives a softmax over the labels, or a sigmoid per label for
a multi-label head, computed in fp32 whatever the model's dtype. Batches are right-padded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from llm_pipeline.config import ModelConfig
from llm_pipeline.errors import ModelError, ModelLoadError, UserError
from llm_pipeline.models.builders import (
    checkpoint_config,
    from_architecture,
    head_modules,
    pretrained,
)
from llm_pipeline.models.generation import (
    load_checked_folder,
    longest_first,
    pad_right,
    read_saved_config,
)
from llm_pipeline.models.sources import ensure_pad_token
from llm_pipeline.tasks.kinds import CLASSIFIER

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

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


def build_classifier(
    model: ModelConfig, tokenizer: PreTrainedTokenizerBase, labels: Mapping[str, Any]
) -> PreTrainedModel:
    """The classifier `model` describes, scoring the labels `labels` gives (the label set's
    config fields), its pad id the tokenizer's. Raises ModelError."""
    for key, value in (
        ("model.encoder_decoder", model.encoder_decoder),
        ("model.warm_start_decoder", model.warm_start_decoder),
    ):
        if value is not None:
            raise ModelError(
                f"{key} builds a generating model; a classifier is built from model.source or "
                "model.architecture"
            )
    ensure_pad_token(tokenizer)
    if model.architecture is not None:
        built = _classifier_from_architecture(model.architecture, tokenizer, labels)
    else:
        assert model.source is not None  # ModelConfig guarantees exactly one source
        built = _pretrained_classifier(model.source, model=model, labels=labels)
    built.config.pad_token_id = int(tokenizer.pad_token_id)
    vocabulary = int(getattr(built.get_input_embeddings(), "num_embeddings", len(tokenizer)))
    if vocabulary < len(tokenizer):
        raise ModelError(
            f"model {built.config.model_type!r} has {vocabulary} token embeddings but the "
            f"tokenizer has {len(tokenizer)} tokens; use the model's own tokenizer"
        )
    return built


def _classifier_from_architecture(
    architecture: dict[str, Any], tokenizer: PreTrainedTokenizerBase, labels: Mapping[str, Any]
) -> PreTrainedModel:
    """Random weights in the shape `architecture` gives; the caller seeds torch first. The
    architecture's own values win, except the labels: they are the data's."""
    return from_architecture(
        architecture,
        kind=CLASSIFIER,
        defaults={"vocab_size": len(tokenizer), "pad_token_id": int(tokenizer.pad_token_id)},
        overrides=labels,
    )


def _pretrained_classifier(
    source: str, *, model: ModelConfig, labels: Mapping[str, Any]
) -> PreTrainedModel:
    """The checkpoint at `source` with a head for `labels`: its own head when it was trained
    on the same labels, else a fresh one."""
    config = checkpoint_config("model.source", source, model=model, kind=CLASSIFIER)
    had_head = _has_classification_head(config)
    theirs = _label_names(config)
    ours = [str(labels["id2label"][i]) for i in range(len(labels["id2label"]))]
    for key, value in labels.items():
        setattr(config, key, value)
    # A head of another size cannot load; transformers starts it afresh (and says so).
    built = pretrained(
        source, model=model, kind=CLASSIFIER, config=config, ignore_mismatched_sizes=True
    )
    if not had_head:
        logger.warning(
            "model.source %r has no classification head: it gets a fresh one (random, "
            "seeded) for the %d labels %s",
            source,
            len(ours),
            _listed(ours),
        )
    elif theirs != ours:
        _reinitialise(built, head_modules(built))
        logger.warning(
            "model.source %r is a classifier of %d other labels (%s): its head (%s) starts "
            "afresh for this run's %d labels %s",
            source,
            len(theirs),
            _listed(theirs),
            ", ".join(head_modules(built)),
            len(ours),
            _listed(ours),
        )
    return built


def _has_classification_head(config: PretrainedConfig) -> bool:
    return any(name.endswith("ForSequenceClassification") for name in config.architectures or [])


def _label_names(config: PretrainedConfig) -> list[str]:
    id2label = {int(k): str(v) for k, v in (config.id2label or {}).items()}
    return [id2label[i] for i in sorted(id2label)]


def _listed(names: list[str], most: int = 8) -> str:
    shown = ", ".join(repr(name) for name in names[:most])
    return f"[{shown}{', ...' if len(names) > most else ''}]"


def _reinitialise(model: PreTrainedModel, names: list[str]) -> None:
    """Start the named modules again as the model's own initialisation would (under ZeRO-3,
    each gathered whole on rank 0 and partitioned again)."""
    import deepspeed
    import torch

    for name in names:
        module = getattr(model, name)
        with (
            deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=0),
            torch.no_grad(),
        ):
            for param in module.parameters():
                # transformers' initialisers skip what loading marked as initialised.
                param._is_hf_initialized = False
            for part in module.modules():
                model._init_weights(part)


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
    from transformers import AutoModelForSequenceClassification

    folder = Path(model_dir)
    _check_classifier(folder, error)
    model, tokenizer = load_checked_folder(
        folder,
        AutoModelForSequenceClassification,
        expected=_EXPECTED,
        device=device,
        dtype=dtype,
        error=error,
        pad_token=True,
    )
    set_pad_token_id(model, tokenizer)
    return model, tokenizer


def set_pad_token_id(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Give the model's config the tokenizer's pad id where it has none: a decoder's head
    finds each row's last token by it, and cannot score a padded batch without it."""
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id


def _check_classifier(folder: Path, error: type[UserError]) -> None:
    config = read_saved_config(folder, error, expected=_EXPECTED)
    architectures = list(getattr(config, "architectures", None) or [])
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        kind = ", ".join(architectures) or str(config.model_type)
        raise error(
            f"model folder {folder} holds a {kind} model (model_type {config.model_type!r}), "
            "not a sequence classifier: labels need a model with a classification head "
            "(AutoModelForSequenceClassification); give the finetune step's output folder"
        )
    if getattr(config, "problem_type", None) == "regression":
        raise error(
            f"model folder {folder} holds a regression head (problem_type 'regression'), "
            "not a classifier: it scores no labels"
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
