"""Text classification served: a batch of texts (or pairs of texts) becomes labels with
scores, in one forward pass (`TextClassification.serving_model`).

The model folder is the finetune step's (`AutoModelForSequenceClassification`); its labels
are the ones training wrote into its config (`LabelSet.from_model_config`). Texts are
tokenized as training tokenized them: a pair as a pair (the tokenizer's own separator and
segment ids), cut to the server's input limit, longest text first.

A single-label model scores its labels with a softmax and answers the likeliest,
`{"label": ..., "score": ...}`; a multi-label model scores each label with a sigmoid and
answers the list of those whose score reaches its threshold (possibly none). With
`top_k`, either answers the k likeliest, highest first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_pipeline.errors import ParameterError, ServeError
from llm_pipeline.serve.schemas import GenerationParameters
from llm_pipeline.serve.served import (
    ModelInput,
    Prediction,
    describe_model,
    input_limit,
    torch_placement,
)
from llm_pipeline.serve.settings import Settings, env_name
from llm_pipeline.tasks import Instance, InstanceError, Task
from llm_pipeline.tasks.text_classification.labels import TEXT_PAIR_ATTRIBUTE, LabelSet
from llm_pipeline.tasks.text_classification.model import load_classifier

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class Classifier:
    """A loaded sequence classifier and tokenizer, its labels, and its input limit."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    task: Task
    labels: LabelSet
    max_input_tokens: int

    @classmethod
    def load(cls, settings: Settings, folder: Path, task: Task) -> Classifier:
        """Load the classifier in `folder` (ModelLoadError if it is not one); the server's
        default parameters must suit it (ServeError)."""
        model, tokenizer = load_classifier(folder, **torch_placement(settings))
        labels = LabelSet.from_model_config(model.config)
        served = cls(model, tokenizer, task, labels, input_limit(settings, tokenizer))
        try:
            served.check_parameters(settings.parameters)
        except ParameterError as exc:
            raise ServeError(f"{env_name('parameters')}: {exc}") from None
        return served

    def model_input(self, instance: Instance) -> ModelInput:
        """The text, or the (text, text_pair) tuple, as the task checked it; a pair only for
        a model trained on pairs (or one that does not say), which it would read as a pair
        it never saw (InstanceError)."""
        assert isinstance(instance, str | tuple)  # serving_instance made it
        if isinstance(instance, tuple) and self.reads_pairs is False:
            raise InstanceError(
                "this model was trained on single texts, not pairs: send the text alone",
                ("text_pair",),
            )
        return instance

    @property
    def reads_pairs(self) -> bool | None:
        """Whether training read pairs of texts (None: its folder does not say)."""
        return getattr(self.model.config, TEXT_PAIR_ATTRIBUTE, None)

    def check_parameters(self, parameters: GenerationParameters) -> None:
        """`top_k` must be between 1 and the number of labels."""
        count = len(self.labels.names)
        top_k = parameters.top_k
        if top_k is not None and not 1 <= top_k <= count:
            raise ParameterError(
                "top_k", f"{top_k} is outside 1..{count}: this model scores {count} labels"
            )

    def predict(
        self,
        parameters: GenerationParameters,
        inputs: list[ModelInput],
        should_stop: Callable[[], bool] | None = None,
    ) -> list[Prediction]:
        """Each input's label and score (or labels and scores), from one forward pass."""
        scores = self.scores(inputs).tolist()
        return [self._answer(row, parameters.top_k) for row in scores]

    def scores(self, inputs: list[ModelInput]) -> torch.Tensor:
        """Each input's score per label (rows in input order, columns in id order): softmax
        probabilities, or per-label sigmoids for a multi-label model. One forward pass."""
        import torch

        encoded = [self._encode(one) for one in inputs]
        batch = self.tokenizer.pad(encoded, return_tensors="pt")
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            logits = self.model(**batch.to(device)).logits.float()
        if self.labels.multi_label:
            return torch.sigmoid(logits).cpu()
        return torch.softmax(logits, dim=-1).cpu()

    def _encode(self, one: ModelInput) -> Any:
        if not isinstance(one, str | tuple):  # a streamed input: only chat tasks take one
            raise TypeError("a classifier reads a text or a pair of texts per instance")
        text, pair = (one, None) if isinstance(one, str) else one
        return self.tokenizer(text, pair, truncation=True, max_length=self.max_input_tokens)

    def _answer(self, row: list[float], top_k: int | None) -> Prediction:
        # Highest first; equal scores keep the labels' id order.
        ranked = sorted(range(len(row)), key=lambda i: -row[i])
        if top_k is None and self.labels.multi_label:
            ranked = [i for i in ranked if row[i] >= self.labels.threshold]
        scored = [{"label": self.labels.names[i], "score": row[i]} for i in ranked]
        if top_k is not None:
            return scored[:top_k]
        return scored if self.labels.multi_label else scored[0]

    def warm_up(self) -> None:
        """One forward pass on a short text."""
        self.predict(GenerationParameters(), ["The model answers before health says so."])

    def describe(self) -> dict[str, Any]:
        """What is served, for the log, the stats route and the page (its labels)."""
        return {
            **describe_model(self.model),
            "task": self.task.name,
            "max_input_tokens": self.max_input_tokens,
            "labels": list(self.labels.names),
            "multi_label": self.labels.multi_label,
            "threshold": self.labels.threshold,
            # Whether it was trained on pairs of texts (None: not recorded): the page's
            # second text box.
            "text_pair": self.reads_pairs,
        }
