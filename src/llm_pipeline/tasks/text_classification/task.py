"""Text classification: a text (or a pair of texts) in, one of a fixed set of labels out.

Rows map the roles `text` and `label`, plus `text_pair` for pairs (question and passage,
premise and hypothesis). A label is a string or an integer; the label set is read from the
training split unless `data.labels` gives it, and it becomes the model's `id2label`. With
`data.multi_label` a row's label is a list, the head is scored by a sigmoid per label, and
a label is predicted when its score reaches `data.threshold`.

The model is an encoder (or a decoder) with a classification head
(`AutoModelForSequenceClassification`). Served, an instance is a text or
`{"text": ..., "text_pair": ...}`, and the prediction is a label with its score.
"""

from collections.abc import Callable, Mapping, Sequence
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
    source_text,
)
from llm_pipeline.tasks.kinds import CLASSIFIER, ModelKind


class TextClassification(Task):
    """Sequence classification with an encoder and a head (DistilBERT, BERT, RoBERTa,
    DeBERTa), or a decoder with one."""

    name: ClassVar[str] = "text_classification"

    # data
    # The single-text set comes first: it is what `data.columns` means when left out.
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("text", "label"),
        ("text", "text_pair", "label"),
    )
    target_role: ClassVar[str] = "label"
    data_keys: ClassVar[frozenset[str]] = frozenset(
        {"max_length", "labels", "multi_label", "threshold"}
    )

    def role_set_among(self, columns: Any) -> tuple[str, ...] | None:
        # A dataset holding `text_pair` is read as pairs (the longer set wins).
        given = set(columns)
        fitting = [roles for roles in self.role_sets if set(roles) <= given]
        return max(fitting, key=len) if fitting else None

    def source_texts(self, batch: Mapping[str, Sequence[Any]]) -> list[str | None]:
        """The text, or the text and its pair, which the same pair of texts must match."""
        texts = [source_text(value) for value in batch["text"]]
        if "text_pair" not in batch:
            return texts
        pairs = [source_text(value) for value in batch["text_pair"]]
        return [
            None if text is None or pair is None else f"{text}\n\x1f{pair}"
            for text, pair in zip(texts, pairs, strict=True)
        ]

    def builtin_datasets(self) -> Mapping[str, BuiltinDataset]:
        """The demo's dataset (`demo_data`)."""
        from llm_pipeline.tasks.text_classification import demo_data

        return {demo_data.NAME: demo_data.DATASET}

    def preprocess(
        self, dataset: Any, *, tokenizer: Any, output_dir: str | Path, data: Any, model: Any
    ) -> PreprocessResult:
        """The label set resolved, texts tokenized, labels as ids (multi-hot with
        `data.multi_label`); rows without a usable text or label left out and counted."""
        from llm_pipeline.tasks.text_classification.preprocess import preprocess_classification

        return preprocess_classification(
            dataset, tokenizer=tokenizer, output_dir=output_dir, data=data, model=model, task=self
        )

    # model and training
    model_kind: ClassVar[ModelKind] = CLASSIFIER

    def training_labels(self, spec: Any) -> Any:
        """The label set preprocess wrote beside the dataset (`data.labels`)."""
        from llm_pipeline.tasks.text_classification import training

        return training.label_set(spec)

    def model_labels(self, spec: Any, label_set: Any) -> Mapping[str, Any] | None:
        """The head's labels and whether it reads text pairs, for `build_model`."""
        from llm_pipeline.tasks.text_classification import training

        return training.head_config(spec, label_set, self)

    def build_model(
        self, model: Any, tokenizer: Any, *, labels: Mapping[str, Any] | None = None
    ) -> Any:
        """An encoder (or a decoder) with a head for `labels` (`model.build_classifier`)."""
        from llm_pipeline.errors import ModelError
        from llm_pipeline.tasks.text_classification.model import build_classifier

        if labels is None:
            raise ModelError("a classifier is built for a label set, and none was given")
        return build_classifier(model, tokenizer, labels)

    def training_collator(
        self, tokenizer: Any, model: Any, *, pad_to_multiple_of: int | None
    ) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Input ids, the attention mask and (BERT pairs) token type ids padded alike; a
        row's labels are one id (or one 0/1 per label) and need no padding."""
        from transformers import DataCollatorWithPadding

        return DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of)

    def training_loss(
        self, train: Any, *, label_set: Any = None, train_set: Any = None
    ) -> Callable[..., Any]:
        """Cross-entropy over the labels (a sigmoid each, multi-label), weighted by
        `train.class_weights` from the training split's counts (`loss`)."""
        from llm_pipeline.errors import TrainError
        from llm_pipeline.tasks.text_classification.loss import (
            balanced_class_weights,
            classifier_loss,
        )

        if label_set is None:
            raise TrainError("a classifier trains on a label set, and none was given")
        weights = None
        if train.class_weights is not None and train_set is not None:
            weights = balanced_class_weights(train_set["labels"], label_set)
        return classifier_loss(
            multi_label=label_set.multi_label,
            weights=weights,
            label_smoothing=train.label_smoothing,
        )

    def lora_options(self, model: Any) -> dict[str, Any]:
        """The head is new (or new to these labels), so no frozen weights could stand in for
        it: it trains whole beside the adapters, and merging puts it in the saved model."""
        from peft import TaskType

        from llm_pipeline.models.builders import head_modules

        return {"task_type": TaskType.SEQ_CLS, "modules_to_save": head_modules(model)}

    # evaluation
    # Macro-F1 weighs every label alike, so a model cannot pass the gate by predicting the
    # common labels only; accuracy and weighted F1 are reported beside it.
    metric_names: ClassVar[tuple[str, ...]] = ("macro_f1", "accuracy", "weighted_f1")
    source_column: ClassVar[str] = "text"
    reference_column: ClassVar[str] = "label"
    serving_column: ClassVar[str] = "text"
    evaluation_defaults: ClassVar[Mapping[str, Any]] = {"score_base_model": True}

    def scorer(self) -> Any:
        """Accuracy and F1s of the predicted labels, beside the majority class (`scoring`)."""
        from llm_pipeline.tasks.text_classification.scoring import ClassifierScorer

        return ClassifierScorer(self)

    report_title: ClassVar[str] = "Text classification evaluation"
    source_label: ClassVar[str] = "text"
    prediction_label: ClassVar[str] = "predicted label"
    output_label: ClassVar[str] = "label"

    # serving
    serving_page: ClassVar[ServingPage] = ServingPage(
        title="Classify",
        action="Classify",
        placeholder="Text to classify",
        output="Labels",
        # None offered: the page asks for every label's score itself (top_k).
        parameters=(),
    )
    serving_parameters: ClassVar[tuple[str, ...]] = ("top_k",)
    serving_instance_shape: ClassVar[str] = (
        'a list of texts or {"text": ..., "text_pair": ...} objects'
    )

    def serving_example_of(self, row: Mapping[str, Any]) -> Any:
        """The text, or for a dataset of pairs `{"text": ..., "text_pair": ...}`: a pair
        model is probed, and shown, with pairs."""
        text, pair = str(row["text"]), row.get("text_pair")
        return text if pair is None else {"text": text, "text_pair": str(pair)}

    def serving_instance(self, value: Any) -> Instance:
        """A text, or an object with "text" and optionally "text_pair"; a pair becomes a
        (text, text_pair) tuple."""
        if isinstance(value, str):
            if not value.strip():
                raise InstanceError("text is empty")
            return value
        if not isinstance(value, dict):
            raise InstanceError(
                f'expected a text (string) or {{"text": ..., "text_pair": ...}}, got '
                f"{json_type(value)}"
            )
        extra = sorted(set(value) - {"text", "text_pair"})
        if extra:
            raise InstanceError(
                f'unknown key {extra[0]!r}; an instance object holds "text" and optionally '
                '"text_pair"'
            )
        if "text" not in value:
            raise InstanceError('an instance object needs "text"')
        texts = []
        for key in ("text", "text_pair"):
            if key not in value:
                continue
            text = value[key]
            if not isinstance(text, str):
                raise InstanceError(f"{key} must be a string, got {json_type(text)}", (key,))
            if not text.strip():
                raise InstanceError(f"{key} is empty", (key,))
            texts.append(text)
        return texts[0] if len(texts) == 1 else (texts[0], texts[1])

    def serving_prompter(
        self, tokenizer: Any, *, prefix: str, chat_template: str | None
    ) -> Callable[[Instance], str]:
        """A classifier reads its texts as given (a pair is tokenized as a pair, not joined
        here); this is the single text, for what shows or logs a prompt."""

        def prompt(instance: Instance) -> str:
            if isinstance(instance, tuple):
                return f"{instance[0]}\n\n{instance[1]}"
            assert isinstance(instance, str)  # serving_instance made it
            return instance

        return prompt

    def serving_widget(self) -> Any:
        """A text box (two, for pairs) and every label's score as a bar."""
        from llm_pipeline.tasks.text_classification.page import WIDGET

        return WIDGET

    def serving_model(self, settings: Any, folder: Path) -> Any:
        """A classifier that scores a batch of texts (or pairs) in one forward pass."""
        from llm_pipeline.tasks.text_classification.serving import Classifier

        return Classifier.load(settings, folder, self)

    # fit check
    #: Labels the head is estimated for when data.labels leaves them to preprocess.
    fit_default_labels: ClassVar[int] = 2

    def fit_lengths(self, config: Any, shape: Any) -> tuple[int, int]:
        """A text (or pair): data.max_length, else the cap a tokenizer may reach, within the
        model's positions (a BERT's 512). Its label is no token."""
        from llm_pipeline.fit.places import DEFAULT_SOURCE_CAP

        read = config.data.max_length or DEFAULT_SOURCE_CAP
        return min(read, shape.max_positions or DEFAULT_SOURCE_CAP), 0

    def fit_labels(self, config: Any) -> tuple[int, str | None]:
        """data.labels', else a small default with a note (the label set is read from the
        training split only in preprocess; the head is hidden x labels, a small part of any
        estimate)."""
        if config.data.labels is not None:
            return len(config.data.labels), None
        labels = self.fit_default_labels
        return labels, (
            f"classifier head estimated for {labels} labels: data.labels is unset and the "
            "label set is read from the training split in preprocess (the head is a small part)"
        )

    def fit_terms(self) -> Any:
        """An encoder's or a decoder's stack with a head, forward only outside training: the
        `fit_terms` module."""
        from llm_pipeline.tasks.text_classification import fit_terms

        return fit_terms
