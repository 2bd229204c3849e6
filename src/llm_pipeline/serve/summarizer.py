"""The served model: where its files come from, and how a batch of texts becomes summaries.

Texts are read as training read documents (the same prefix, truncated to the same number of
tokens), and generated with the code evaluation uses (`models.generation`: longest first,
right padding with an attention mask), so a served summary is the one the evaluate step
scored for the same document and settings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_pipeline.errors import UserError
from llm_pipeline.serve.errors import ServeError
from llm_pipeline.serve.schemas import GenerationParameters
from llm_pipeline.serve.settings import MAX_INPUT_TOKENS_CAP, Settings, env_name
from llm_pipeline.storage import is_remote, local_copy, to_uri

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Summarizer:
    """A loaded model and tokenizer, and how the server reads texts for it."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source_prefix: str
    max_input_tokens: int

    @classmethod
    def load(cls, settings: Settings, *, download_dir: Path) -> Summarizer:
        """Fetch the model folder `settings` names (gs:// into `download_dir`) and load it.

        Raises ServeError (or another UserError) with a one-line reason.
        """
        folder = fetch_model(settings.model_uri, download_dir)
        # Imported here, not at the top: the server listens (health 503) while torch loads.
        import torch

        from llm_pipeline.models.generation import load_seq2seq

        device = torch.device(settings.device) if settings.device else None
        dtype = getattr(torch, settings.dtype) if settings.dtype else None
        model, tokenizer = load_seq2seq(folder, device=device, dtype=dtype)
        limit = settings.max_input_tokens or min(
            int(tokenizer.model_max_length or MAX_INPUT_TOKENS_CAP), MAX_INPUT_TOKENS_CAP
        )
        return cls(model, tokenizer, settings.source_prefix, limit)

    def input_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of `texts` as the model reads them: prefixed and truncated."""
        encoded = self.tokenizer(
            [self.source_prefix + text for text in texts],
            truncation=True,
            max_length=self.max_input_tokens,
        )
        return [list(ids) for ids in encoded["input_ids"]]

    def summarize(self, parameters: GenerationParameters, texts: list[str]) -> list[str]:
        """One summary per text, in one generate call (the batcher sized the batch)."""
        from llm_pipeline.models.generation import GenerationSettings, generate_summaries

        settings = GenerationSettings(batch_size=len(texts), **parameters.model_dump())
        generated = generate_summaries(
            self.model, self.tokenizer, self.input_ids(texts), config=settings
        )
        return generated.texts

    def describe(self) -> dict[str, Any]:
        """What is served, for the log and the stats route."""
        return {
            "model": type(self.model).__name__,
            "device": str(next(self.model.parameters()).device),
            "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch."),
            "max_input_tokens": self.max_input_tokens,
            "source_prefix": self.source_prefix,
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
        return local
    try:
        folder = local_copy(uri, download_dir)
    except FileNotFoundError:
        raise ServeError(f"model {uri}: no such folder") from None
    except UserError:
        raise
    except Exception as exc:
        raise ServeError(f"model {uri}: could not copy it down: {first_line(exc)}") from None
    files = sum(1 for path in folder.rglob("*") if path.is_file())
    logger.info("copied %s (%d files) to %s", uri, files, folder)
    return folder


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
