"""Where the examples come from and how they become model inputs."""

from typing import Literal

import jinja2
from pydantic import Field, field_validator, model_validator

from llm_pipeline.config.base import Section

#: Evaluation rows below which a score is too noisy to decide a deployment on: one row then
#: moves a 0-100 score by more than 3 points, and a mean of so few skewed per-row scores
#: (ROUGE's pile up near 0) is far from the normal shape that its percentile-bootstrap 95%
#: interval relies on, so the interval is too narrow. 30 is the usual rule of thumb for a
#: sample mean. The validation carve takes at least this many rows where the data allows.
MIN_EVALUATION_ROWS = 30


#: `builtin:NAME` names a dataset the project builds offline: a task's demo data
#: (`Task.builtin_datasets`).
BUILTIN_PREFIX = "builtin:"


class DataConfig(Section):
    """The dataset: its source, splits, columns and the preprocessing of its text."""

    dataset: str = Field(
        description="A Hugging Face hub dataset id (`cnn_dailymail`), a local file or folder "
        "(jsonl, json, csv, parquet, arrow, or `save_to_disk` output), a `gs://` / `s3://` "
        "path, or a dataset built offline from the docstrings of the installed Python "
        "packages: `builtin:docstrings` (document, summary: summary line ← body), "
        '`builtin:instructions` (prompt, response: "What does `X` do?" ← summary line), '
        "`builtin:docstring_packages` (text, label: a docstring's summary and prose ← the "
        "top-level package it comes from, among the 8 installed packages with the most "
        "docstrings) or `builtin:preferences` (prompt, chosen, rejected: the same prompts as "
        "`builtin:instructions`, its own summary line chosen, another object's of the same "
        "module rejected). "
        "Local paths are relative to the config file."
    )
    subset: str | None = Field(
        default=None, description="Hub dataset configuration name, e.g. `3.0.0` for cnn_dailymail."
    )
    revision: str | None = Field(
        default=None, description="Hub dataset revision (branch, tag or commit) to pin."
    )
    columns: dict[str, str] = Field(
        default_factory=lambda: {"document": "document", "summary": "summary"},
        description="Maps each role the task reads to the column name in the source data: "
        "summarization `document` and `summary`; instruction_tuning either `prompt` and "
        "`response`, or `messages` (a column of chats); text_classification `text` and "
        "`label`, plus `text_pair` for pairs of texts; preference_tuning `prompt` (or "
        "`messages`), `chosen` and `rejected`. Left out, each role of the task's "
        "first role set reads the column of its own name.",
    )
    train_split: str = Field(default="train", description="Name of the training split.")
    validation_split: str = Field(
        default="validation",
        description="Name of the validation split; carved from train when the source has none.",
    )
    test_split: str | None = Field(
        default="test",
        description="Name of the test split used by evaluate; `null` evaluates on validation.",
    )
    validation_fraction: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="Share of train carved out as validation when the source has no "
        f"validation split. The carve takes at least {MIN_EVALUATION_ROWS} rows (on fewer, "
        "the gate compares noise) as long as train keeps as many; with "
        "`max_samples.validation` set, it takes that many rows instead, up to half of train.",
    )
    max_samples: dict[str, int] = Field(
        default_factory=dict,
        description='Cap on rows per split, e.g. `{"train": 1000, "validation": 100}`; '
        "taken from the start of each split (after the seeded validation carve).",
    )
    seed: int = Field(default=42, description="Seed for the validation carve.")
    prefix: str = Field(
        default="",
        description="summarization: text put before every document, e.g. `summarize: ` for T5 "
        "checkpoints.",
    )
    max_source_length: int | None = Field(
        default=None,
        gt=0,
        description="summarization: documents are truncated to this many tokens; `null` uses "
        "the tokenizer's model_max_length capped at 1024.",
    )
    max_target_length: int | None = Field(
        default=None,
        gt=0,
        description="summarization: summaries are truncated to this many tokens; `null` "
        "computes it from the training data (`target_length_percentile`, capped at "
        "`max_target_length_cap`).",
    )
    target_length_percentile: float = Field(
        default=95.0,
        gt=0,
        le=100,
        description="Percentile of training summary lengths used when max_target_length is null.",
    )
    max_target_length_cap: int = Field(
        default=512, gt=0, description="Upper bound on a computed max_target_length."
    )
    max_length: int | None = Field(
        default=None,
        gt=0,
        description="instruction_tuning: tokens in one sequence, prompt and response together "
        "(and in one packed row). A longer example loses its oldest prompt tokens first, never "
        "the response; the prompt keeps at least its last quarter of this, and a response too "
        "long for the rest is cut at its end. text_classification: tokens of a text (a pair "
        "together), cut at the end (of the longer text of a pair first). `null` uses the "
        "tokenizer's model_max_length capped at 1024.",
    )
    packing: bool | Literal["auto"] = Field(
        default="auto",
        description="instruction_tuning: pack several training examples into each sequence of "
        "`max_length` tokens, with position ids restarting per example, so that attention and "
        "labels stay within each example (no compute is spent on padding). `auto` packs when "
        "training runs on GPUs (`cluster.accelerator_type` on Vertex, this machine's GPUs "
        "locally), and not on the CPU, where a run stays as it was. "
        "For a model whose attention does not follow the position ids (OPT, BERT-style "
        "decoders), the train split stays unpacked and training groups examples by length "
        "instead, as the preprocess log says.",
    )
    chat_template: str | None = Field(
        default=None,
        description="instruction_tuning: a Jinja chat template (Hugging Face's format) for a "
        "tokenizer that has none of its own; the tokenizer's own always wins. `null` is a plain "
        "layout: `### Instruction:\\n{prompt}\\n\\n### Response:\\n{response}<eos>`.",
    )
    labels: list[str | int] | None = Field(
        default=None,
        description="text_classification: the label set, in the order of the model's ids "
        "(`id2label`). `null` reads it from the training split: integer labels sorted as "
        "numbers (labels 0..K-1 keep their values as ids; 1..5 become ids 0..4, named 1..5), "
        "string labels sorted. A label outside the set, in any split, is "
        "left out and counted by name in preprocess's report.",
    )
    multi_label: bool = Field(
        default=False,
        description="text_classification: each row's label is a list of labels (any number, "
        "none included); the head scores each label with a sigmoid, and a label is "
        "predicted when its score reaches `threshold`.",
    )
    threshold: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="text_classification with `multi_label`: the sigmoid score at which a "
        "label is predicted, in evaluation and serving alike.",
    )
    num_proc: int = Field(
        default=1, ge=1, description="Worker processes for tokenization (datasets' num_proc)."
    )

    @field_validator("max_samples")
    @classmethod
    def _positive_caps(cls, value: dict[str, int]) -> dict[str, int]:
        bad = {split: n for split, n in value.items() if n <= 0}
        if bad:
            raise ValueError(f"every cap must be > 0, got {bad}")
        return value

    @field_validator("chat_template")
    @classmethod
    def _parses_as_jinja(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                jinja2.Environment().parse(value)
            except jinja2.TemplateSyntaxError as exc:
                raise ValueError(
                    f"not a Jinja template: {exc.message} (line {exc.lineno})"
                ) from None
        return value

    @field_validator("labels")
    @classmethod
    def _distinct_labels(cls, value: list[str | int] | None) -> list[str | int] | None:
        if value is None:
            return value
        if len(value) < 2:
            raise ValueError(f"a classifier needs at least 2 labels, got {value}")
        names = [str(label) for label in value]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"labels must be distinct; repeated: {repeated}")
        return value

    @field_validator("columns")
    @classmethod
    def _non_empty_columns(cls, value: dict[str, str]) -> dict[str, str]:
        empty = [role for role, column in value.items() if not column.strip()]
        if empty:
            raise ValueError(f"column names must not be empty (roles {empty})")
        return value

    @model_validator(mode="after")
    def _distinct_splits(self) -> "DataConfig":
        if self.train_split == self.validation_split:
            raise ValueError(
                f"train_split and validation_split are both {self.train_split!r}; "
                "name different splits (a missing validation split is carved from train)"
            )
        return self


def packs(packing: bool | Literal["auto"], *, packable: bool, on_gpus: bool | None) -> bool:
    """Whether preprocess packs the train split: `data.packing` as given, or for `auto`, a
    `packable` model (a causal LM) trained on GPUs. There, a packed row spends no compute on
    padding, and the default attention (SDPA, whose causal mask transformers builds
    block-diagonal from the restarting position ids) keeps the examples apart; on the CPU the
    run stays as it was.
    `on_gpus` None: not known (a step run on its own), and `auto` does not pack."""
    if packing == "auto":
        return packable and bool(on_gpus)
    return packing
