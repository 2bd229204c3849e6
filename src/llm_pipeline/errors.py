"""The base of every error that is the user's to fix (bad data, settings, paths).

Steps report these as one clear message instead of a traceback; anything else is a bug
and keeps its traceback.
"""

import json
from collections.abc import Iterable, Iterator
from typing import Any

#: The deepest nesting of arrays and objects read from a user's JSON (a config, a `--set`
#: value, a request body): far beyond any real one, and far below the depth at which
#: Python's recursive decoder, or the validators after it, raise RecursionError.
MAX_JSON_DEPTH = 64


class UserError(Exception):
    """A problem the user can fix; the message says what and where."""

    #: The exit code of a step or command that stops on this error (ConfigError: 2;
    #: a preempted training run: 75).
    exit_code = 1


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it wraps (its explicit cause, else the exception it arose during),
    and so on down to the first.

    Libraries wrap the error that says what really happened (`datasets` wraps a reader's
    error, `transformers` a hub client's), so callers look down the chain for it. A chain
    can loop back on itself; each exception comes once.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def json_path(loc: Iterable[str | int]) -> str:
    """Where in a JSON document a problem is: `("train", "epochs")` as `train.epochs`,
    `("instances", 3, "text")` as `instances[3].text` (pydantic's error locations)."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages (`got array`)."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    names.update({list: "array", dict: "object", type(None): "null"})
    return names.get(type(value), type(value).__name__)


class JSONTooDeep(ValueError):
    """A JSON document nested deeper than `MAX_JSON_DEPTH` arrays and objects."""

    def __init__(self) -> None:
        super().__init__(f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects")


def load_json(text: str | bytes | bytearray, **options: Any) -> Any:
    """`json.loads(text, **options)` for text a user sent, refusing deep nesting.

    `[[[[...]]]]` a few thousand levels deep makes `json.loads` raise RecursionError, which
    no caller expects from bad input; such a document, and one merely deeper than
    `MAX_JSON_DEPTH`, raises JSONTooDeep (a ValueError) instead. json.JSONDecodeError as usual.
    """
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise JSONTooDeep() from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise JSONTooDeep()
    return value


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in `value` (a scalar: 0), without recursing."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return deepest
