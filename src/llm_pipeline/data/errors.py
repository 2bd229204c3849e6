"""The error a user sees when their data cannot be used."""

from llm_pipeline.errors import UserError


class DataError(UserError, ValueError):
    """Data that cannot be used as configured.

    The message says what is wrong and where (config key, file, split, column) and, where
    there is one, the fix; the component prints it instead of a traceback.
    """
