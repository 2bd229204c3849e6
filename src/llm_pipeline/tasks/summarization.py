"""Summarization: a document in, a short summary out."""

from typing import Any, ClassVar, Literal

from llm_pipeline.tasks.base import Task


class Summarization(Task):
    """Abstractive summarization with a seq2seq model (T5, BART, encoder-decoder)."""

    name: ClassVar[str] = "summarization"

    # model and training
    model_kind: ClassVar[Literal["seq2seq", "causal_lm"]] = "seq2seq"

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

    # serving
    serving_parameters: ClassVar[tuple[str, ...]] = (
        "max_new_tokens",
        "min_new_tokens",
        "num_beams",
        "length_penalty",
        "no_repeat_ngram_size",
    )

    def source_texts(self, batch: dict[str, list[Any]], *, prefix: str) -> list[str]:
        # T5 checkpoints were pre-trained with task prefixes ("summarize: "); other models
        # take the document as it is, so the prefix comes from the config, default empty.
        return [prefix + str(text) for text in batch["document"]]
