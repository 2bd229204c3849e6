"""Summarization: a document in, a short summary out."""

from typing import Any, ClassVar

from llm_pipeline.tasks.base import ModelKind, Task


class Summarization(Task):
    """Abstractive summarization with a seq2seq model (T5, BART, encoder-decoder)."""

    name: ClassVar[str] = "summarization"
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (("document", "summary"),)
    target_role: ClassVar[str] = "summary"

    # model and training
    model_kind: ClassVar[ModelKind] = "seq2seq"

    # evaluation
    # rougeLsum (summary-level LCS, one sentence per line) is what summarization papers lead with.
    metric_names: ClassVar[tuple[str, ...]] = ("rougeLsum", "rouge1", "rouge2", "rougeL")
    source_column: ClassVar[str] = "document"
    reference_column: ClassVar[str] = "summary"
    lead_baseline: ClassVar[bool] = True
    report_title: ClassVar[str] = "Summarization evaluation"
    source_label: ClassVar[str] = "document"
    output_label: ClassVar[str] = "summary"

    def source_texts(self, batch: dict[str, list[Any]], *, prefix: str) -> list[str]:
        # T5 checkpoints were pre-trained with task prefixes ("summarize: "); other models
        # take the document as it is, so the prefix comes from the config, default empty.
        return [prefix + str(text) for text in batch["document"]]
