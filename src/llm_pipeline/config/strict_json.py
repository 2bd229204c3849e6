"""JSON read strictly: what Python's `json` lets through silently is reported instead.

`json.loads` keeps the last of two equal keys, reads `NaN`/`Infinity` (not JSON at all),
and turns `1e400` into infinity. In a config each of these is a mistake the user should
hear about, by its JSON path, rather than a value they did not mean; in a prediction
request, a body the server refuses by name (a duplicated key is also how a request reads
one way to a proxy that checked the first value and another to the server).
"""

import math
from collections.abc import Iterator
from typing import Any

from llm_pipeline.errors import load_json


class _NonFinite(float):
    """A number that is not finite, keeping the text it was written as for the message."""

    text: str

    @classmethod
    def of(cls, text: str) -> float:
        value = float(text)  # float() reads NaN, Infinity and -Infinity too
        if math.isfinite(value):
            return value
        marked = cls(value)
        marked.text = text
        return marked


class _DuplicatedKeys(dict[str, Any]):
    """A JSON object in which some keys were given more than once (the last value kept)."""

    duplicates: dict[str, int]


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for key, _ in pairs:
        counts[key] = counts.get(key, 0) + 1
    duplicates = {key: count for key, count in counts.items() if count > 1}
    if not duplicates:
        return dict(pairs)
    marked = _DuplicatedKeys(pairs)
    marked.duplicates = duplicates
    return marked


def loads(text: str | bytes | bytearray) -> Any:
    """Parse `text` as JSON, marking what `problems` reports.

    Raises json.JSONDecodeError where the text is not JSON, and JSONTooDeep (a ValueError)
    where it nests deeper than any config does.
    """
    return load_json(
        text, parse_float=_NonFinite.of, parse_constant=_NonFinite.of, object_pairs_hook=_object
    )


def problems(value: Any, path: str = "") -> list[str]:
    """Duplicated keys and non-finite numbers in a parsed `value`, each with its JSON path
    (`path` is the value's own); a plain non-finite float counts too."""
    return list(_walk(value, path))


def _walk(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, float) and not math.isfinite(value):
        text = value.text if isinstance(value, _NonFinite) else repr(value)
        yield f"{path}: {text} is not a finite number" if path else f"{text} is not a finite number"
    elif isinstance(value, dict):
        for key, count in getattr(value, "duplicates", {}).items():
            where = f"in {path}" if path else "at the top level"
            yield f"duplicate key {key!r} {where} (given {count} times; only the last would count)"
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")
