"""Which network is fine-tuned, and where its weights and tokenizer come from."""

from typing import Any, Literal

from pydantic import Field, model_validator

from llm_pipeline.config.base import Section


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
        "or `package:<python_package>/<folder>` for weights shipped inside an installed package.",
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
    revision: str | None = Field(default=None, description="Hub revision of `source` to pin.")
    trust_remote_code: bool = Field(
        default=False, description="Allow model code from the hub to run. Off unless needed."
    )

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
