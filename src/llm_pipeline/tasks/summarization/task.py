"""Summarization: a document in, a short summary out."""

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from llm_pipeline.errors import json_type
from llm_pipeline.tasks.base import (
    BuiltinDataset,
    Instance,
    InstanceError,
    PreprocessResult,
    ServingPage,
    Task,
)
from llm_pipeline.tasks.kinds import SEQ2SEQ, ModelKind


class Summarization(Task):
    """Abstractive summarization with a seq2seq model (T5, BART, encoder-decoder)."""

    name: ClassVar[str] = "summarization"

    # data
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (("document", "summary"),)
    target_role: ClassVar[str] = "summary"
    data_keys: ClassVar[frozenset[str]] = frozenset(
        {
            "prefix",
            "max_source_length",
            "max_target_length",
            "target_length_percentile",
            "max_target_length_cap",
        }
    )

    def builtin_datasets(self) -> Mapping[str, BuiltinDataset]:
        """The demo's dataset (`demo_data`)."""
        from llm_pipeline.tasks.summarization import demo_data

        return {demo_data.NAME: demo_data.DATASET}

    def preprocess(
        self, dataset: Any, *, tokenizer: Any, output_dir: str | Path, data: Any, model: Any
    ) -> PreprocessResult:
        """Documents and summaries as token ids, each cut to its max length."""
        from llm_pipeline.tasks.summarization.preprocess import preprocess_seq2seq

        return preprocess_seq2seq(
            dataset, tokenizer=tokenizer, output_dir=output_dir, data=data, model=model, task=self
        )

    # model and training
    model_kind: ClassVar[ModelKind] = SEQ2SEQ

    def build_model(
        self, model: Any, tokenizer: Any, *, labels: Mapping[str, Any] | None = None
    ) -> Any:
        """A seq2seq model: a checkpoint, an architecture, or an encoder-decoder warm-started
        from two encoders (`models.loading`)."""
        from llm_pipeline.models.loading import load_model

        return load_model(model, tokenizer, kind=self.model_kind)

    def training_collator(
        self, tokenizer: Any, model: Any, *, pad_to_multiple_of: int | None
    ) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Documents padded with the pad id, summaries with -100 (out of the loss); the model
        makes its decoder inputs from the labels."""
        from transformers import DataCollatorForSeq2Seq

        from llm_pipeline.train.collators import LABEL_PAD

        collator: Callable[[list[dict[str, Any]]], dict[str, Any]] = DataCollatorForSeq2Seq(
            tokenizer,
            model=model,
            label_pad_token_id=LABEL_PAD,
            pad_to_multiple_of=pad_to_multiple_of,
        )
        return collator

    def training_loss(
        self, train: Any, *, label_set: Any = None, train_set: Any = None
    ) -> Callable[..., Any]:
        """Cross-entropy over the summary's tokens, divided by the step's label tokens."""
        from llm_pipeline.train.trainer import token_mean_loss

        return token_mean_loss(train.label_smoothing, shift=self.model_kind.causal)

    # evaluation
    # rougeLsum (summary-level LCS, one sentence per line) is what summarization papers lead with.
    metric_names: ClassVar[tuple[str, ...]] = ("rougeLsum", "rouge1", "rouge2", "rougeL")
    source_column: ClassVar[str] = "document"
    reference_column: ClassVar[str] = "summary"
    serving_column: ClassVar[str] = "document"
    report_title: ClassVar[str] = "Summarization evaluation"
    source_label: ClassVar[str] = "document"
    prediction_label: ClassVar[str] = "prediction"
    output_label: ClassVar[str] = "summary"

    def scorer(self) -> Any:
        """ROUGE on the summaries, beside the lead-k baseline (`scoring`)."""
        from llm_pipeline.tasks.summarization.scoring import SummarizationScorer

        return SummarizationScorer(self)

    # serving
    serving_page: ClassVar[ServingPage] = ServingPage(
        title="Summarize",
        action="Summarize",
        placeholder="Text to summarize",
        output="Summary",
        parameters=("max_new_tokens", "num_beams"),
    )
    serving_parameters: ClassVar[tuple[str, ...]] = (
        "max_new_tokens",
        "min_new_tokens",
        "num_beams",
        "length_penalty",
        "no_repeat_ngram_size",
    )
    serving_instance_shape: ClassVar[str] = 'a list of texts or {"text": ...} objects'

    def serving_instance(self, value: Any) -> Instance:
        """A document: a string, or an object holding only "text"."""
        if isinstance(value, dict):
            extra = sorted(set(value) - {"text"})
            if extra:
                raise InstanceError(
                    f'unknown key {extra[0]!r}; an instance object holds only "text"'
                )
            if "text" not in value:
                raise InstanceError('an instance object needs "text"')
            value = value["text"]
            if not isinstance(value, str):
                raise InstanceError(f"text must be a string, got {json_type(value)}")
        elif not isinstance(value, str):
            raise InstanceError(
                f'expected a string or an object {{"text": string}}, got {json_type(value)}'
            )
        if not value.strip():
            raise InstanceError("text is empty")
        return value

    def serving_prompter(
        self, tokenizer: Any, *, prefix: str, chat_template: str | None
    ) -> Callable[[Instance], str]:
        """The document after the prefix training put before documents."""

        def prompt(instance: Instance) -> str:
            assert isinstance(instance, str)  # serving_instance made it
            return prefix + instance

        return prompt

    def serving_widget(self) -> Any:
        """A text box and the summary under it."""
        from llm_pipeline.tasks.summarization.page import WIDGET

        return WIDGET

    def serving_model(self, settings: Any, folder: Path) -> Any:
        """A seq2seq model that summarizes a batch of documents in one generate call."""
        from llm_pipeline.tasks.summarization.serving import Summarizer

        return Summarizer.load(settings, folder, self)

    # fit check
    def fit_lengths(self, config: Any, shape: Any) -> tuple[int, int]:
        """A document read by the encoder (data.max_source_length, else the cap a tokenizer
        may reach) and its summary written by the decoder (data.max_target_length, else its
        computed cap)."""
        from llm_pipeline.fit.places import DEFAULT_SOURCE_CAP

        data = config.data
        return (
            data.max_source_length or DEFAULT_SOURCE_CAP,
            data.max_target_length or data.max_target_length_cap,
        )
