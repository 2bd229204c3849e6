"""The served model: what the routes and the batcher ask of it, and where its files come from.

The task (`Settings.task`) loads its model as it serves it (`Task.serving_model`, in the
task's package: a seq2seq model that summarizes, a causal LM that completes chats, a
classifier that scores labels), building on the helpers here. Each reads a model input per
instance (a prompt, or the text or pair of texts to classify) and gives one prediction per
input (a text, or labels with scores), in one model call per batch: a generate call, or a
forward pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llm_pipeline.engines import EngineChoice
from llm_pipeline.errors import ServeError, UserError, first_line
from llm_pipeline.serve.settings import MAX_INPUT_TOKENS_CAP, Settings, env_name
from llm_pipeline.serve.streaming import StreamedInput
from llm_pipeline.storage import is_remote, local_copy, to_uri
from llm_pipeline.tasks import Instance, TextPair

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from llm_pipeline.serve.schemas import GenerationParameters

logger = logging.getLogger(__name__)

#: What a served model reads for one instance: a prompt (the text a seq2seq model or a
#: causal LM starts from), or the text, or pair of texts, a classifier scores.
ModelInput = str | TextPair | StreamedInput
#: One prediction as the response carries it (a JSON value): a generated text, or a
#: classifier's `{"label", "score"}` (or a list of them).
Prediction = Any


class ServedModel(Protocol):
    """A loaded model as the routes and the batcher use it."""

    def model_input(self, instance: Instance) -> ModelInput:
        """What the model reads for a checked instance (InstanceError if it cannot be)."""
        ...

    def check_parameters(self, parameters: GenerationParameters) -> None:
        """Raise ParameterError for parameters this model cannot take: bounds only the
        loaded model knows (the server's own limits were checked with the request)."""
        ...

    def predict(
        self,
        parameters: GenerationParameters,
        inputs: list[ModelInput],
        should_stop: Callable[[], bool] | None = None,
    ) -> list[Prediction]:
        """One prediction per input, in one model call (the batcher sized the batch). A
        generating model asks `should_stop` at each decoding step and ends the call when it
        says True (every client of the batch has gone): its predictions are then unread."""
        ...

    def warm_up(self) -> None:
        """Predict once, so the first request does not pay for lazy initialisation."""
        ...

    def describe(self) -> dict[str, Any]:
        """What is served, for the log and the stats route."""
        ...


def prompts_of(inputs: list[ModelInput]) -> list[str]:
    """The prompts of a generating model's batch (its model inputs are texts alone)."""
    prompts = [text for text in inputs if isinstance(text, str)]
    if len(prompts) != len(inputs):
        raise TypeError("a generating model reads one text per instance, not a pair of texts")
    return prompts


def input_limit(settings: Settings, tokenizer: PreTrainedTokenizerBase) -> int:
    """Most tokens read of one input: the setting, else the tokenizer's limit (capped)."""
    return settings.max_input_tokens or min(
        int(tokenizer.model_max_length or MAX_INPUT_TOKENS_CAP), MAX_INPUT_TOKENS_CAP
    )


def engine_choice(settings: Settings) -> EngineChoice:
    """The engine the settings name (`LLM_PIPELINE_SERVE_ENGINE`, set by the deploy step
    from `deploy.engine`)."""
    if settings.engine == "ctranslate2":
        compute_type = settings.compute_type or "int8"
        return EngineChoice("ctranslate2", compute_type, "the server's settings")
    return EngineChoice()


def engine_device(settings: Settings) -> str:
    """Where CTranslate2 runs: the settings' device, else a GPU if it sees one."""
    if settings.device:
        return settings.device
    import ctranslate2

    return "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"


def torch_placement(settings: Settings) -> dict[str, Any]:
    """The device and dtype the settings ask for, as the model loaders take them."""
    import torch

    return {
        "device": torch.device(settings.device) if settings.device else None,
        "dtype": getattr(torch, settings.dtype) if settings.dtype else None,
    }


def describe_model(model: Any) -> dict[str, Any]:
    """The model's class, device and dtype."""
    weights = next(model.parameters())
    return {
        "model": type(model).__name__,
        "device": str(weights.device),
        "dtype": str(weights.dtype).removeprefix("torch."),
    }


def fetch_model(uri: str | None, download_dir: Path) -> Path:
    """A local folder holding the model at `uri`; a remote folder is copied down whole."""
    if not uri:
        raise ServeError(
            f"no model to serve: pass --model PATH or set {env_name('model_uri')} "
            "(a local folder or gs://bucket/folder)"
        )
    if not is_remote(uri):
        local = Path(to_uri(uri)).expanduser()
        if not local.exists():  # said before torch loads: seconds sooner
            raise ServeError(f"model folder {local}: no such folder")
        if not local.is_dir():
            raise ServeError(
                f"model folder {local} is a file: give the folder that holds config.json "
                "and the weights"
            )
        return local
    try:
        folder = local_copy(uri, download_dir)
    except FileNotFoundError:
        raise ServeError(f"model {uri}: no such folder") from None
    except UserError:
        raise
    except Exception as exc:
        raise ServeError(
            f"model {uri}: could not copy it down: {first_line(exc, with_type=True)}"
        ) from None
    files = sum(1 for path in folder.rglob("*") if path.is_file())
    logger.info("copied %s (%d files) to %s", uri, files, folder)
    return folder
