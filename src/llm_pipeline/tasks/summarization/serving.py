"""Summarization served: a batch of documents becomes summaries (`Summarization.serving_model`).

Texts are read as training read documents (the same prefix, truncated to the same number of
tokens), and generated with the code and engine evaluation uses (`models.generation`:
longest first, right padding with an attention mask; or the model's CTranslate2 form,
`engines`), so a served summary is the one the evaluate step scored for the same document
and settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_pipeline.serve.schemas import GenerationParameters
from llm_pipeline.serve.served import (
    ModelInput,
    Prediction,
    describe_model,
    engine_choice,
    engine_device,
    input_limit,
    prompts_of,
    torch_placement,
)
from llm_pipeline.serve.settings import Settings
from llm_pipeline.tasks import Instance, Task

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class Summarizer:
    """A loaded seq2seq model and tokenizer, and how the server reads texts for it."""

    model: PreTrainedModel | None  # None where an engine generates
    tokenizer: PreTrainedTokenizerBase
    task: Task
    source_prefix: str
    max_input_tokens: int
    model_input: Callable[[Instance], str]  # the text the model reads for an instance
    engine: Any = None  # `engines.ctranslate2_run.Ct2Summarizer`, or None: transformers

    @classmethod
    def load(cls, settings: Settings, folder: Path, task: Task) -> Summarizer:
        """Load the seq2seq model in `folder` (ModelLoadError if it is not one)."""
        # Imported here, not at the top: the server listens (health 503) while torch loads.
        from llm_pipeline.models.generation import load_seq2seq

        choice = engine_choice(settings)
        model, engine = None, None
        if choice.engine == "ctranslate2":
            from llm_pipeline.engines import load_generator

            engine = load_generator(folder, choice, seq2seq=True, device=engine_device(settings))
            tokenizer = engine.tokenizer
        else:
            model, tokenizer = load_seq2seq(folder, **torch_placement(settings))
        prefix = settings.source_prefix
        prompt = task.serving_prompter(tokenizer, prefix=prefix, chat_template=None)
        limit = input_limit(settings, tokenizer)
        return cls(model, tokenizer, task, prefix, limit, prompt, engine)

    def input_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of `texts` as the model reads them: truncated as training did."""
        encoded = self.tokenizer(texts, truncation=True, max_length=self.max_input_tokens)
        return [list(ids) for ids in encoded["input_ids"]]

    def check_parameters(self, parameters: GenerationParameters) -> None:
        """Nothing to check: the request was checked against the server's limits."""

    def predict(
        self,
        parameters: GenerationParameters,
        inputs: list[ModelInput],
        should_stop: Callable[[], bool] | None = None,
    ) -> list[Prediction]:
        """One summary per text, in one generate call (the batcher sized the batch)."""
        from llm_pipeline.models.generation import (
            GENERATION_FIELDS,
            GenerationSettings,
            generate_summaries,
        )

        chosen = parameters.model_dump(include=set(GENERATION_FIELDS))
        settings = GenerationSettings(batch_size=len(inputs), **chosen)
        input_ids = self.input_ids(prompts_of(inputs))
        if self.engine is not None:
            return list(
                self.engine.generate(input_ids, config=settings, should_stop=should_stop).texts
            )
        assert self.model is not None
        generated = generate_summaries(
            self.model, self.tokenizer, input_ids, config=settings, should_stop=should_stop
        )
        return generated.texts

    def warm_up(self) -> None:
        """A two-token greedy summary: cheap whatever beams the model's own config asks."""
        quick = GenerationParameters(max_new_tokens=2, min_new_tokens=0, num_beams=1)
        self.predict(quick, [self.model_input("The model answers before health says so.")])

    def describe(self) -> dict[str, Any]:
        """What is served, for the log and the stats route."""
        served = self.engine.describe() if self.engine is not None else describe_model(self.model)
        return {
            **served,
            "task": self.task.name,
            "max_input_tokens": self.max_input_tokens,
            "source_prefix": self.source_prefix,
        }
