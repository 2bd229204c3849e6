"""Metrics, run and user labels as Vertex AI labels, and back.

On Vertex a model version's metrics live only in its labels, so the gate compares what this
module wrote. Label rules (Model Registry and Endpoints alike): at most 64 labels; keys
and values at most 63 characters of `[a-z0-9_-]`; keys start with a letter.

Encoding, chosen so that reading back gives exactly what was written:

* **Metric key** — `m_` + the metric name with an escape for everything the rules forbid:
  `a-z`, `0-9` and `_` stay; an upper-case letter becomes `-` + that letter in lower case;
  any other printable ASCII character (`-` included) becomes `-` + its two hex digits, which
  always start with a digit (0x20-0x7e), so the two escapes cannot be confused.
  `rougeLsum` → `m_rouge-lsum`, `eval/loss` → `m_eval-2floss`. The encoding is one-to-one,
  so two metric names can never share a key, and the original name comes back from the key
  alone — no separate key → name table eats into the 64-label budget. Names that encode to
  more than 63 characters, or hold non-ASCII characters, are refused.
* **Metric value** — the metric **rounded to 4 decimals**, in fixed point without trailing
  zeros, `.` written `_`, a leading `-` for negatives: `37.0269` → `37_0269`, `100.0` →
  `100`, `-0.5` → `-0_5`. Magnitudes too large for 63 fixed-point characters keep Python's
  shortest round-trip form with the exponent's `+` dropped (`1.5e70` → `1_5e70`); `nan`, `inf`,
  `-inf` are written as such. Values with at most 4 decimals round-trip exactly.
* **Run** — `run`, the run name lower-cased with every other character made `-`, cut to 63
  characters (for filtering in the console; it may differ from the exact run name).
* **User labels** pass through unchanged but must follow the rules themselves; `run` and the
  `m_` prefix are reserved. Reading back, a label that does not decode as a metric is a
  user label.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from llm_pipeline.registry.base import RegistryError

METRIC_PREFIX = "m_"
RUN_KEY = "run"
MAX_LABELS = 64
MAX_LENGTH = 63
DECIMALS = 4

_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_NUMBER = re.compile(r"-?(?:\d+(?:_\d+)?(?:e-?\d+)?|inf)|nan")
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
_HEX = frozenset("0123456789abcdef")


class LabelError(RegistryError):
    """A name or value cannot be written as a Vertex label, or a label is not ours to read."""


@dataclass(frozen=True)
class VersionLabels:
    """What a model version's labels hold, decoded."""

    metrics: dict[str, float] = field(default_factory=dict)
    run: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  #: the user's own labels


def is_valid_key(key: str) -> bool:
    """Whether `key` is a label key Vertex accepts."""
    return _KEY.fullmatch(key) is not None


def is_valid_value(value: str) -> bool:
    """Whether `value` is a label value Vertex accepts."""
    return _VALUE.fullmatch(value) is not None


def encode_metric_name(name: str) -> str:
    """The label key for metric `name` (`rougeLsum` → `m_rouge-lsum`)."""
    if not name:
        raise LabelError("a metric with an empty name cannot be stored as a Vertex label")
    parts = []
    for char in name:
        if char in _PLAIN:
            parts.append(char)
        elif "A" <= char <= "Z":
            parts.append("-" + char.lower())
        elif " " <= char <= "~":
            parts.append(f"-{ord(char):02x}")
        else:
            raise LabelError(
                f"metric {name!r}: only ASCII names can be stored as Vertex labels "
                f"({char!r} is not); rename the metric"
            )
    key = METRIC_PREFIX + "".join(parts)
    if len(key) > MAX_LENGTH:
        raise LabelError(
            f"metric {name!r} encodes to a {len(key)}-character label key ({key}); Vertex "
            f"allows {MAX_LENGTH}: shorten the metric's name"
        )
    return key


def decode_metric_name(key: str) -> str:
    """The metric name that `encode_metric_name` wrote as `key`."""
    if not key.startswith(METRIC_PREFIX) or not is_valid_key(key):
        raise LabelError(f"label key {key!r} is not a metric key (they start with m_)")
    text, out, i = key[len(METRIC_PREFIX) :], [], 0
    while i < len(text):
        char = text[i]
        if char != "-":
            out.append(char)
            i += 1
        elif i + 1 < len(text) and "a" <= text[i + 1] <= "z":
            out.append(text[i + 1].upper())
            i += 2
        elif i + 2 < len(text) and text[i + 1] in "234567" and text[i + 2] in _HEX:
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            raise LabelError(f"label key {key!r} has a broken escape at {text[i:]!r}")
    if not out:
        raise LabelError(f"label key {key!r} names no metric")
    return "".join(out)


def encode_metric_value(value: float) -> str:
    """The label value for a metric: rounded to 4 decimals (`37.0269` → `37_0269`)."""
    number = float(value)
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    text = f"{number:.{DECIMALS}f}".rstrip("0").rstrip(".")
    if text == "-0":
        text = "0"
    if len(text) > MAX_LENGTH:
        text = repr(number).replace("+", "")
    return text.replace(".", "_")


def decode_metric_value(text: str) -> float:
    """The number `encode_metric_value` wrote as `text`; anything else is refused."""
    if _NUMBER.fullmatch(text) is None:
        raise LabelError(f"label value {text!r} is not a metric value (e.g. 37_0269)")
    return float(text.replace("_", "."))


def run_label(run: str) -> str:
    """`run` as a label value: lower case, other characters `-`, at most 63 characters."""
    return "".join(c if c in _PLAIN or c == "-" else "-" for c in run.lower())[:MAX_LENGTH]


def check_labels(labels: Mapping[str, str], whose: str) -> None:
    """Refuse labels Vertex would refuse, all problems in one message."""
    problems = [
        f"{key!r}={value!r}"
        for key, value in labels.items()
        if not (is_valid_key(key) and is_valid_value(value))
    ]
    if problems:
        raise LabelError(
            f"{whose}: invalid Vertex labels {', '.join(problems)} (keys and values: at most "
            f"{MAX_LENGTH} characters of a-z, 0-9, _ and -; keys start with a letter)"
        )
    if len(labels) > MAX_LABELS:
        raise LabelError(f"{whose}: {len(labels)} labels; Vertex allows {MAX_LABELS}")


def encode_version_labels(
    metrics: Mapping[str, float],
    *,
    run: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """All labels of a new model version: the user's, `run`, then one per metric."""
    user = dict(labels or {})
    reserved = sorted(k for k in user if k == RUN_KEY or k.startswith(METRIC_PREFIX))
    if reserved:
        raise LabelError(
            f"labels {', '.join(reserved)}: `{RUN_KEY}` and keys starting with "
            f"{METRIC_PREFIX} are reserved for the run and the metrics"
        )
    out = dict(user)
    if run:
        out[RUN_KEY] = run_label(run)
    for name, value in metrics.items():
        out[encode_metric_name(name)] = encode_metric_value(value)
    check_labels(out, "model version")
    return out


def decode_version_labels(labels: Mapping[str, str]) -> VersionLabels:
    """Split a version's labels back into metrics, run and the user's labels.

    A label under `m_` that this module could not have written (a model registered by other
    means) stays a plain label rather than failing the whole read; the gate then reports the
    metric as missing, naming the ones it has.
    """
    metrics: dict[str, float] = {}
    user: dict[str, str] = {}
    for key, value in labels.items():
        if key == RUN_KEY:
            continue
        try:
            metrics[decode_metric_name(key)] = decode_metric_value(value)
        except LabelError:  # not a metric label (no m_), or one someone else wrote
            user[key] = value
    return VersionLabels(metrics=metrics, run=labels.get(RUN_KEY) or None, labels=user)
