"""How the fine-tuned model is scored."""

from pydantic import Field, field_validator

from llm_pipeline.config.base import Section

#: Settings only a model that continues a prompt (a causal LM) takes: a seq2seq model's
#: search stays deterministic, as published summarization scores are.
PROMPT_CONTINUATION_SETTINGS = ("do_sample", "temperature", "top_p", "stop")
#: Settings of generated text and its scoring (the search, ROUGE, the lead-k baseline): a
#: classifier, which scores labels in one forward pass, reads none of them.
TEXT_SETTINGS = (
    "max_new_tokens",
    "min_new_tokens",
    "num_beams",
    "length_penalty",
    "no_repeat_ngram_size",
    *PROMPT_CONTINUATION_SETTINGS,
    "use_stemmer",
    "lead_k",
)


class EvaluateConfig(Section):
    """Generation and scoring settings. Unset (null) fields take the task's default
    (instruction_tuning: greedy, 128 new tokens, the un-fine-tuned model scored too), then
    the model's generation config."""

    max_samples: int | None = Field(
        default=None, gt=0, description="Cap on evaluated examples; `null` scores the whole split."
    )
    batch_size: int = Field(
        default=16, ge=1, description="Documents generated per batch (per process)."
    )
    processes: int | None = Field(
        default=None,
        ge=1,
        description="Generation processes (torchrun), each with its share of the documents; "
        "`null` uses every GPU the machine sees (on Vertex, all of a training node's), or 1 "
        "on a CPU-only machine.",
    )
    max_new_tokens: int | None = Field(
        default=None, gt=0, description="Longest summary (or response) in tokens."
    )
    min_new_tokens: int | None = Field(
        default=None, ge=0, description="Shortest summary in tokens."
    )
    num_beams: int | None = Field(default=None, ge=1, description="Beam width; 1 is greedy.")
    length_penalty: float | None = Field(
        default=None, description="Beam length penalty (>1 favours longer summaries)."
    )
    no_repeat_ngram_size: int | None = Field(
        default=None, ge=0, description="Forbid repeating n-grams of this size."
    )
    do_sample: bool | None = Field(
        default=None,
        description="Sample instead of searching (causal LMs only; scores then vary with "
        "`seed`). Default: greedy.",
    )
    temperature: float | None = Field(
        default=None,
        gt=0,
        description="Sampling temperature; needs `do_sample` true (refused without it).",
    )
    top_p: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Nucleus sampling mass; needs `do_sample` true (refused without it).",
    )
    stop: list[str] | None = Field(
        default=None,
        description="Strings that end a response (causal LMs only): generation stops at the "
        "first and the response is cut before it; an empty string is refused.",
    )
    use_stemmer: bool = Field(
        default=True, description="Porter-stem tokens before matching (as published scores do)."
    )
    bootstrap_samples: int = Field(
        default=1000, ge=0, description="Resamples for the 95% confidence intervals; 0 skips."
    )
    lead_k: int = Field(
        default=3,
        ge=0,
        description="summarization: also score the first k sentences as a baseline; 0 skips "
        "(another task refuses a value other than the default).",
    )
    score_base_model: bool | None = Field(
        default=None,
        description="Also generate with the model as it was before fine-tuning (built from the "
        "trained model's recorded `model` settings) and score it as a baseline (`base_*`): "
        "shows what training changed, at twice the generation time. Default: the task's "
        "(summarization no, instruction_tuning and text_classification yes; preference_tuning "
        "always, its metrics are relative to that model).",
    )
    seed: int = Field(default=42, description="Seed for the bootstrap (and for sampling).")

    @field_validator("stop")
    @classmethod
    def _non_empty_stops(cls, value: list[str] | None) -> list[str] | None:
        # An empty string is in every text: generation would stop after one token.
        if value is not None and not all(value):
            raise ValueError(f"stop strings must not be empty, got {value}")
        return value
