"""The error a user sees when a model or a dataset cannot be evaluated."""

from llm_pipeline.errors import UserError


class EvaluationError(UserError, ValueError):
    """A model folder or evaluation split that cannot be scored; the message says which
    and what to do about it. The step prints it instead of a traceback."""
