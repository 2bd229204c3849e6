"""Chat completions served: prompts and chats become a causal LM's completions, for every
task whose model is a chat model (instruction tuning, preference tuning: their
`serving_model`).

A chat is rendered as training rendered it (`tasks.chat`: the tokenizer's own chat
template, else training's `data.chat_template`, which the deploy step hands the server,
else the plain layout), ending where the answer starts; the completion is
generated with the code evaluation uses (`models.completion`: longest first, left padding,
greedy unless a temperature above 0 is given), so a greedy served answer is the one the
evaluate step scored for the same prompt. A prompt longer than the server reads
(`max_input_tokens`) loses its start, never the latest turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_pipeline.errors import ServeError
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
from llm_pipeline.serve.streaming import StreamedInput
from llm_pipeline.tasks import Instance, Task
from llm_pipeline.tasks.chat import ChatTemplateError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class Completer:
    """A loaded causal LM and tokenizer, and how the server turns instances into prompts."""

    model: PreTrainedModel | None  # None where an engine generates
    tokenizer: PreTrainedTokenizerBase
    task: Task
    max_input_tokens: int
    #: New tokens when neither the request nor the server's defaults say: the task's
    #: evaluation default, else the model's generation config, else the server's limit
    #: (transformers' own default, max_length 20, would count the prompt too).
    default_new_tokens: int
    model_input: Callable[[Instance], str]  # the chat rendered up to where the answer starts
    engine: Any = None  # `engines.ctranslate2_run.Ct2Completer`, or None: transformers

    @classmethod
    def load(cls, settings: Settings, folder: Path, task: Task) -> Completer:
        """Load the causal LM in `folder` (ModelLoadError if it is not one)."""
        from llm_pipeline.models.completion import load_causal_lm

        choice = engine_choice(settings)
        model, engine = None, None
        if choice.engine == "ctranslate2":
            from llm_pipeline.engines import load_generator

            engine = load_generator(folder, choice, seq2seq=False, device=engine_device(settings))
            tokenizer, own_new_tokens = engine.tokenizer, engine.generation.max_new_tokens
        else:
            model, tokenizer = load_causal_lm(folder, **torch_placement(settings))
            own_new_tokens = model.generation_config.max_new_tokens
        try:
            prompt = task.serving_prompter(
                tokenizer, prefix="", chat_template=settings.chat_template
            )
        except ChatTemplateError as exc:
            raise ServeError(f"model folder {folder}: {exc}") from None
        limit = settings.max_new_tokens_limit
        new_tokens = task.evaluation_defaults.get("max_new_tokens") or own_new_tokens or limit
        limits = input_limit(settings, tokenizer), min(new_tokens, limit)
        return cls(model, tokenizer, task, *limits, prompt, engine)

    def check_parameters(self, parameters: GenerationParameters) -> None:
        """Nothing to check: the request was checked against the server's limits."""

    def predict(
        self,
        parameters: GenerationParameters,
        inputs: list[ModelInput],
        should_stop: Callable[[], bool] | None = None,
    ) -> list[Prediction]:
        """One completion per prompt, in one generate call (the batcher sized the batch)."""
        from llm_pipeline.models.completion import CompletionSettings, complete

        settings = CompletionSettings(
            batch_size=len(inputs),
            max_new_tokens=parameters.max_new_tokens or self.default_new_tokens,
            do_sample=bool(parameters.temperature),
            temperature=parameters.temperature or None,
            top_p=parameters.top_p,
            stop=parameters.stop or (),
            max_prompt_tokens=self.max_input_tokens,
        )
        sinks = {i: one.sink for i, one in enumerate(inputs) if isinstance(one, StreamedInput)}
        prompts = prompts_of(
            [one.prompt if isinstance(one, StreamedInput) else one for one in inputs]
        )
        on_text = (
            (lambda row, text: sinks[row].push(text) if row in sinks else None) if sinks else None
        )
        if self.engine is not None:
            done = self.engine.complete(
                prompts, settings=settings, should_stop=should_stop, on_text=on_text
            )
        else:
            assert self.model is not None
            done = complete(
                self.model,
                self.tokenizer,
                prompts,
                settings=settings,
                should_stop=should_stop,
                on_text=on_text,
            )
        return list(done.texts)

    def warm_up(self) -> None:
        """A two-token greedy completion of a one-turn chat."""
        chat = [{"role": "user", "content": "The model answers before health says so."}]
        self.predict(GenerationParameters(max_new_tokens=2), [self.model_input(chat)])

    def describe(self) -> dict[str, Any]:
        """What is served, for the log and the stats route."""
        served = self.engine.describe() if self.engine is not None else describe_model(self.model)
        return {
            **served,
            "task": self.task.name,
            "max_input_tokens": self.max_input_tokens,
        }
