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

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from llm_pipeline.errors import json_type
from llm_pipeline.tasks.base import Instance, InstanceError, ServingPage, Task
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

    # model and training
    model_kind: ClassVar[ModelKind] = CLASSIFIER

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
        layout="labels",
        title="Classify",
        action="Classify",
        placeholder="Text to classify",
        output="Labels",
        parameters=("top_k",),
    )
    serving_parameters: ClassVar[tuple[str, ...]] = ("top_k",)
    serving_instance_shape: ClassVar[str] = (
        'a list of texts or {"text": ..., "text_pair": ...} objects'
    )

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
