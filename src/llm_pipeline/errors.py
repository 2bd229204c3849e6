"""The base of every error that is the user's to fix (bad data, settings, paths).

Steps report these as one clear message instead of a traceback; anything else is a bug
and keeps its traceback.
"""

from collections.abc import Iterable, Iterator


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
