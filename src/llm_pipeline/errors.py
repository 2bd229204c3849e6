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


def first_line(exc: BaseException, *, with_type: bool = False, most: int = 300) -> str:
    """An exception's first line, for a one-line message (its type's name when it has none;
    with `with_type`, `Type: line`). A longer line (transformers lists every model type it
    knows after an unknown one) keeps its first sentence."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = text.splitlines()[0]
    if len(line) > most:
        sentence = line.split(". ", 1)[0]
        line = sentence + "." if len(sentence) <= most else line[: most - 1] + "…"
    return f"{type(exc).__name__}: {line}" if with_type else line


def json_path(loc: Iterable[str | int]) -> str:
    """Where in a JSON document a problem is: `("train", "epochs")` as `train.epochs`,
    `("instances", 3, "text")` as `instances[3].text` (pydantic's error locations)."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def shown_value(value: Any, most: int = 80) -> str:
    """A value as a message quotes it: its repr, cut to `most` characters."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 1] + "…"


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


class DataError(UserError, ValueError):
    """Data that cannot be used as configured.

    The message says what is wrong and where (config key, file, split, column) and, where
    there is one, the fix; the component prints it instead of a traceback.
    """


class ModelError(UserError):
    """A model that cannot be built as configured; the message names the config key, the
    location tried and why it failed."""


class ModelSourceError(ModelError, ValueError):
    """A model or tokenizer location that cannot be used; the message names what was tried."""


class ModelLoadError(ModelError, ValueError):
    """A model folder that cannot be loaded for generation; the message says why."""


#: The exit code of a worker, and of the finetune step, stopped by SIGTERM: EX_TEMPFAIL from
#: sysexits.h, "try again later". Any non-zero exit makes Vertex AI restart the worker, and
#: with `cluster.restart_job_on_worker_restart` the whole job, which then resumes; a distinct
#: code tells a preemption from a failure in logs and in the local runner's summary.
PREEMPTED_EXIT_CODE = 75


class TrainError(UserError, RuntimeError):
    """Training could not run or did not finish; the message says why and what to change."""


class TrainingPreempted(TrainError):
    """Training stopped on SIGTERM; the message says which checkpoint a restart resumes from."""

    exit_code = PREEMPTED_EXIT_CODE


class EvaluationError(UserError, ValueError):
    """A model folder or evaluation split that cannot be scored; the message says which
    and what to do about it. The step prints it instead of a traceback."""


class BundleError(UserError):
    """The offline GPU bundle cannot be built or run as asked (too large, a wheel missing,
    pip unreachable, a package the machine lacks)."""


class ServeError(UserError):
    """A serving problem the user can fix; the message names the setting, path or route."""


class UnsafePathError(UserError, OSError):
    """A name read from outside (an object key, a split name, a symbolic link) that would
    reach outside the folder it belongs in; the message names it. An OSError, so code that
    reports a failed copy or read ("cannot read gs://...: ...") reports this one too."""


class ParameterError(ValueError):
    """A request parameter the loaded model cannot take (a bound that only the model knows,
    such as a classifier's number of labels): `name` is the parameter, `what` the problem."""

    def __init__(self, name: str, what: str) -> None:
        super().__init__(f"{name}: {what}")
        self.name = name
        self.what = what
