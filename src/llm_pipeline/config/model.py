"""Which network is fine-tuned, and where its weights and tokenizer come from."""

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from llm_pipeline.config.base import Section
from llm_pipeline.storage import is_remote, looks_like_path

#: A git commit as the hub names it: the one revision that cannot move after review.
_COMMIT = re.compile(r"[0-9a-f]{40}")

#: `model.source: "registry:<model>@<version>"` starts from a registered version (SFT → DPO).
REGISTRY_SCHEME = "registry:"
#: The version part that means "the version an endpoint serves now".
SERVING = "serving"
_REGISTRY_FORM = f'"{REGISTRY_SCHEME}<model>@<version>" or "{REGISTRY_SCHEME}<model>@{SERVING}"'
_VERSION = re.compile(r"[1-9][0-9]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: The longest model name either registry takes (a Vertex display name).
_MAX_NAME = 128


@dataclass(frozen=True)
class RegistryRef:
    """A `registry:` source, parsed: a model's name and a version number or `serving`."""

    model: str
    version: str

    @property
    def serving(self) -> bool:
        """Whether it names the version an endpoint serves rather than a number."""
        return self.version == SERVING

    def __str__(self) -> str:
        return f"{REGISTRY_SCHEME}{self.model}@{self.version}"


def registry_ref(source: str) -> RegistryRef | None:
    """The registry version `source` names; None for any other kind of source; ValueError
    saying what is wrong with a malformed `registry:` one."""
    if not source.startswith(REGISTRY_SCHEME):
        return None
    model, at, version = source[len(REGISTRY_SCHEME) :].rpartition("@")
    problem = None
    if not at:
        problem = "names no version"
    elif not model.strip():
        problem = "names no model"
    elif len(model) > _MAX_NAME or _CONTROL.search(model):
        problem = f"model name {model!r} is not a registry name (1-{_MAX_NAME} plain characters)"
    elif version != SERVING and not _VERSION.fullmatch(version):
        problem = f"version {version!r} is neither a number (1, 2, ...) nor {SERVING!r}"
    if problem:
        raise ValueError(f"{source!r}: {problem}; write {_REGISTRY_FORM}")
    return RegistryRef(model=model, version=version)


def _may_be_hub_id(location: str) -> bool:
    """Whether a model location may name a Hugging Face hub repository (whose contents its
    owner can change) rather than a folder, a bucket, a package or a registry version. The
    config loader has already made local paths absolute, so `owner/name` here is a hub id."""
    return not (
        location.startswith(("package:", REGISTRY_SCHEME))
        or is_remote(location)
        or looks_like_path(location)
    )


class EncoderDecoderSource(Section):
    """Two encoder checkpoints that warm-start a seq2seq model.

    `EncoderDecoderModel.from_encoder_decoder_pretrained` adds cross-attention to the
    decoder copy; this is how a real pretrained network is fine-tuned offline here.
    """

    encoder: str = Field(description="Checkpoint (hub id, folder, `gs://`) of the encoder.")
    decoder: str = Field(description="Checkpoint of the decoder (often the same as encoder).")
    tie_encoder_decoder: bool = Field(
        default=False, description="Share encoder and decoder weights (halves the parameters)."
    )
    cross_attention_init: Literal["random", "self_attention"] = Field(
        default="random",
        description="How the decoder's new cross-attention starts: `random` (as transformers "
        "does), or `self_attention`, a copy of each layer's own self-attention weights, so the "
        "decoder starts out attending to the encoder tokens most like its own. With little "
        "compute this is what lets it learn to read its input (on the demo's pairs, with a "
        "frozen encoder: 91% distinct summaries after 240 steps, where `random` still wrote "
        "one summary for all of them). BERT-style decoders only.",
    )


class ModelConfig(Section):
    """The model to fine-tune. Exactly one of `source`, `architecture`, `encoder_decoder`,
    `warm_start_decoder`."""

    source: str | None = Field(
        default=None,
        description="A pretrained checkpoint: hub id (`t5-small`), local folder, `gs://` folder, "
        "`package:<python_package>/<folder>` for weights shipped inside an installed package, "
        'or a registered version: `"registry:<model>@<version>"`, or `"registry:<model>@serving"` '
        "for the version an endpoint serves now (the registry `deploy.target` names: "
        "`deploy.registry_dir`'s, or Vertex AI Model Registry's), so SFT → DPO is two configs.",
    )
    architecture: dict[str, Any] | None = Field(
        default=None,
        description='An architecture config (`{"model_type": "t5", "d_model": 64, ...}`) '
        "to initialise a model with random weights; needs `tokenizer`.",
    )
    encoder_decoder: EncoderDecoderSource | None = Field(
        default=None, description="Warm-start a seq2seq model from two encoder checkpoints."
    )
    warm_start_decoder: str | None = Field(
        default=None,
        description="Warm-start a causal LM (for `instruction_tuning`) from a BERT-style "
        "encoder checkpoint (hub id, folder, `gs://`, `package:`): its weights load into the "
        "architecture's causal-LM form (`BertLMHeadModel` for BERT and MiniLM) with "
        "`is_decoder` set, so its self-attention only looks back, and an LM head tied to the "
        "word embeddings. How the offline demo fine-tunes real pretrained weights; "
        "`encoder_decoder`'s decoder is built the same way.",
    )
    tokenizer: str | None = Field(
        default=None,
        description="Tokenizer location; defaults to `source` (or the encoder, or "
        "`warm_start_decoder`).",
    )
    revision: str | None = Field(
        default=None,
        description="Hub revision of `source` to pin (branch, tag or commit); a commit hash "
        "when `trust_remote_code` is on.",
    )
    trust_remote_code: bool = Field(
        default=False,
        description="Let the model repository's own Python code (its `auto_map`) run where "
        "the source checkpoint and tokenizer load (preprocess, finetune, evaluate's "
        "base-model score); the fit check never runs it. Off unless needed. A hub `source` "
        "then needs `revision` pinned to a commit hash; any other location must be a "
        "folder, bucket or package.",
    )

    started_from: str | None = Field(
        default=None,
        description="Set by the run, not by hand: the registry version (`model@version`) a "
        "`registry:` source resolved to; the trained model and its registered version record it.",
    )

    @model_serializer(mode="wrap")
    def _without_unset_start(self, handler: SerializerFunctionWrapHandler) -> Any:
        """`started_from` only where a run set it: a config (and a compiled spec's config
        constant) that starts from no registry version reads as it did before the key."""
        dumped = handler(self)
        if self.started_from is None and isinstance(dumped, dict):
            dumped.pop("started_from", None)
        return dumped

    @field_validator("source")
    @classmethod
    def _registry_form(cls, source: str | None) -> str | None:
        if source is not None:
            registry_ref(source)  # a malformed `registry:` source says what is wrong
        return source

    @model_validator(mode="after")
    def _registry_version_is_a_folder(self) -> "ModelConfig":
        """A registry version is a folder of files, never a hub repository: nothing else
        may name one, and a hub revision does not apply to it."""
        elsewhere = [
            key
            for key, location in self._locations()
            if key != "source" and location.startswith(REGISTRY_SCHEME)
        ]
        if elsewhere:
            raise ValueError(
                f"{', '.join(elsewhere)}: a registry version can only be model.source (the "
                "tokenizer comes with it)"
            )
        from_registry = self.source is not None and self.source.startswith(REGISTRY_SCHEME)
        if from_registry and self.revision is not None:
            raise ValueError(
                f"revision {self.revision!r} pins a hub repository; source {self.source!r} "
                "is a registry version (a folder of files): remove revision"
            )
        return self

    @model_validator(mode="after")
    def _exactly_one_source(self) -> "ModelConfig":
        given = [
            name
            for name in ("source", "architecture", "encoder_decoder", "warm_start_decoder")
            if getattr(self, name) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "set exactly one of source, architecture, encoder_decoder, warm_start_decoder"
                + (f" (got {', '.join(given)})" if given else " (got none)")
            )
        if self.architecture is not None:
            if "model_type" not in self.architecture:
                raise ValueError('architecture needs a `model_type` (e.g. "t5")')
            if self.tokenizer is None:
                raise ValueError(
                    "architecture initialises random weights and has no tokenizer: set tokenizer"
                )
        return self

    @model_validator(mode="after")
    def _remote_code_pinned(self) -> "ModelConfig":
        """Code from the hub runs only as the commit the user reviewed: a branch or tag can
        be moved to other code by whoever can push to the repository."""
        if not self.trust_remote_code:
            return self
        unpinnable = [
            f"{key} {location!r}"
            for key, location in self._locations()
            if location != self.source and _may_be_hub_id(location)
        ]
        if unpinnable:
            raise ValueError(
                f"trust_remote_code true would run code from the hub repository of "
                f"{', '.join(unpinnable)}, which revision does not pin (it pins source only): "
                "load it from a folder, a bucket or source itself"
            )
        pinned = self.revision is not None and _COMMIT.fullmatch(self.revision)
        if self.source is not None and _may_be_hub_id(self.source) and not pinned:
            raise ValueError(
                f"trust_remote_code true runs code from the hub repository {self.source!r}: "
                "set revision to the commit hash you reviewed (40 hex characters, as git "
                f"prints it), got {self.revision!r}"
            )
        return self

    def _locations(self) -> list[tuple[str, str]]:
        """(key, location) of every checkpoint or tokenizer this config loads."""
        pair = self.encoder_decoder
        found = [
            ("source", self.source),
            ("tokenizer", self.tokenizer),
            ("warm_start_decoder", self.warm_start_decoder),
            ("encoder_decoder.encoder", pair.encoder if pair else None),
            ("encoder_decoder.decoder", pair.decoder if pair else None),
        ]
        return [(key, location) for key, location in found if location is not None]

    @property
    def tokenizer_source(self) -> str:
        """Where the tokenizer loads from: explicit, else the checkpoint it belongs to."""
        if self.tokenizer is not None:
            return self.tokenizer
        if self.source is not None:
            return self.source
        if self.warm_start_decoder is not None:
            return self.warm_start_decoder
        assert self.encoder_decoder is not None  # guaranteed by _exactly_one_source
        return self.encoder_decoder.encoder
