"""The error the prediction server's callers see: bad settings, a model that will not load,
a server that does not come up or answers with an error."""

from llm_pipeline.errors import UserError


class ServeError(UserError):
    """A serving problem the user can fix; the message names the setting, path or route."""


class ParameterError(ValueError):
    """A request parameter the loaded model cannot take (a bound that only the model knows,
    such as a classifier's number of labels): `name` is the parameter, `what` the problem."""

    def __init__(self, name: str, what: str) -> None:
        super().__init__(f"{name}: {what}")
        self.name = name
        self.what = what
