"""The errors a user sees when a model or tokenizer cannot be found or built.

`models` sits below every step that loads a model (train, evaluation, serve), so it has its
own error type rather than borrowing one from a layer above; each caller still reports it as
the `UserError` it is.
"""

from llm_pipeline.errors import UserError


class ModelError(UserError):
    """A model that cannot be built as configured; the message names the config key, the
    location tried and why it failed."""


class ModelSourceError(ModelError, ValueError):
    """A model or tokenizer location that cannot be used; the message names what was tried."""


class ModelLoadError(ModelError, ValueError):
    """A model folder that cannot be loaded for generation; the message says why."""
