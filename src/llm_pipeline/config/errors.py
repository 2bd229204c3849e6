"""Turn validation failures into one message per problem, each with its JSON path.

The one formatter of pydantic's errors: the config's, the registry's records', and the
server's settings and request bodies (serve/ names the places its own way: environment
variables, the served task's parameters).
"""

import difflib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from llm_pipeline.errors import UserError, json_path

#: Keys an older config may still hold, by path, and what replaces each: such a config is
#: refused like any unknown key, but told where the setting went.
RETIRED_KEYS = {
    "vertex.image": "replaced by vertex.image_repository, from which both images follow "
    "(`<repository>/train:<version>`, `<repository>/serve:<version>`); to name the train "
    "image itself, set vertex.train_image",
    "deploy.serving_image": "replaced by vertex.image_repository, from which both images "
    "follow (`<repository>/train:<version>`, `<repository>/serve:<version>`); to name the "
    "serving image itself, set vertex.serve_image",
}


#: pydantic's error type for `problem`'s refusals.
_PROBLEM = "problem"

#: Names a location for the reader: `train.lora.r` by default.
Namer = Callable[[tuple[int | str, ...]], str]


def problem(message: str, where: tuple[str | int, ...] = ()) -> PydanticCustomError:
    """A validator's refusal, given as is; `where` places it deeper than the value that
    raised it (inside a request's instance: `("messages", 2, "content")`)."""
    # The message goes in as a value: a template would read the braces of {"text"}.
    return PydanticCustomError(_PROBLEM, "{message}", {"message": message, "where": where})


class ConfigError(UserError):
    """A config that cannot be used; `problems` lists every reason, each with its path."""

    exit_code = 2  # a usage error, as argparse's

    def __init__(self, problems: Sequence[str], *, source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        where = f" in {self.source}" if self.source else ""
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''}{where}:"
        return "\n".join([head, *(f"  - {problem}" for problem in self.problems)])


def _model_at(root: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The section model that owns the keys at `loc` (for "did you mean" suggestions)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        model = submodel(model.model_fields[part].annotation)
    return model


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_BOUNDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}

_TYPES = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "dict_type": "an object",
    "list_type": "a list",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


def describe(
    error: ErrorDetails,
    root: type[BaseModel],
    *,
    name: Namer = json_path,
    known_keys: Mapping[tuple[int | str, ...], Sequence[str]] | None = None,
) -> str:
    """One line for one pydantic error: `path: what is wrong, got X`.

    `name` spells a location; `known_keys` gives the keys allowed at a location where they
    are fewer than its model's fields (a served task's parameters)."""
    loc = tuple(error["loc"])
    kind = error["type"]
    ctx = error.get("ctx", {})
    if kind == _PROBLEM:
        loc += tuple(ctx.get("where", ()))
    path = name(loc) if loc else ""
    if kind == _PROBLEM:
        return f"{path}: {ctx['message']}" if path else str(ctx["message"])
    if kind == "extra_forbidden" and path in RETIRED_KEYS:
        return f"{path}: {RETIRED_KEYS[path]}"
    if kind == "extra_forbidden":
        key = str(loc[-1])
        owner = _model_at(root, loc[:-1])
        known = (known_keys or {}).get(loc[:-1]) or (list(owner.model_fields) if owner else [])
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if close:
            return f"{path}: unknown key; did you mean {close[0]!r}?"
        where = name(loc[:-1]) if loc[:-1] else "the top level"
        return f"{path}: unknown key (keys allowed in {where}: {', '.join(known)})"
    if kind == "missing":
        return f"{path}: required, but not given"
    if kind in _BOUNDS:
        symbol, bound = _BOUNDS[kind]
        return f"{path}: must be {symbol} {ctx[bound]}, got {_got(error['input'])}"
    if kind in _TYPES:
        return f"{path}: must be {_TYPES[kind]}, got {_got(error['input'])}"
    if kind == "literal_error":
        return f"{path}: must be one of {ctx['expected']}, got {_got(error['input'])}"
    if kind == "string_pattern_mismatch":
        return f"{path}: must match {ctx['pattern']}, got {_got(error['input'])}"
    if kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
        return f"{path}: {message}" if path else message
    message = error["msg"]
    return f"{path}: {message}, got {_got(error['input'])}" if path else message


def problems_from(
    exc: ValidationError,
    root: type[BaseModel],
    *,
    name: Namer = json_path,
    known_keys: Mapping[tuple[int | str, ...], Sequence[str]] | None = None,
) -> list[str]:
    """Every problem in a ValidationError, in a stable order (`describe` says how)."""
    return [
        describe(error, root, name=name, known_keys=known_keys)
        for error in exc.errors(include_url=False)
    ]


def submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as `X` or `X | None`, else None.

    The config reference nests a table for it and error messages look up its keys for
    "did you mean", so both must agree on which fields are sections.
    """
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = submodel(arg)
            if found is not None:
                return found
    return None
