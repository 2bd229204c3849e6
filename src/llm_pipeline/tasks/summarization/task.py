"""Summarization: a document in, a short summary out."""

from collections.abc import Callable
from typing import Any, ClassVar

from llm_pipeline.errors import json_type
from llm_pipeline.tasks.base import Instance, InstanceError, ServingPage, Task
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

    # model and training
    model_kind: ClassVar[ModelKind] = SEQ2SEQ

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

    def source_texts(self, batch: dict[str, list[Any]], *, prefix: str) -> list[str]:
        # T5 checkpoints were pre-trained with task prefixes ("summarize: "); other models
        # take the document as it is, so the prefix comes from the config, default empty.
        return [prefix + str(text) for text in batch["document"]]

    # serving
    serving_page: ClassVar[ServingPage] = ServingPage(
        layout="document",
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
