"""The error the prediction server's callers see: bad settings, a model that will not load,
a server that does not come up or answers with an error."""

from llm_pipeline.errors import UserError


class ServeError(UserError):
    """A serving problem the user can fix; the message names the setting, path or route."""
