"""Check a schedule's cron string here, the way Vertex AI reads it, before asking Vertex.

Vertex takes unix cron (five fields) with an optional `TZ=` or `CRON_TZ=` prefix naming an
IANA time zone. No package on the registries checks exactly this, and the rules fit in a
page, so they are written out here; every problem names the field and the allowed range.
"""

import re
import zoneinfo
from dataclasses import dataclass

from llm_pipeline.config import ConfigError

MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


@dataclass(frozen=True)
class Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name_value: int = 0


FIELDS = (
    Field("minute", 0, 59),
    Field("hour", 0, 23),
    Field("day of month", 1, 31),
    Field("month", 1, 12, MONTHS, 1),
    Field("day of week", 0, 7, DAYS, 0),
)
_PREFIX = re.compile(r"(?:CRON_TZ|TZ)=(\S+)\s+")
#: The most days each month has (February's 29th comes in leap years).
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _value(text: str, field: Field) -> int:
    upper = text.upper()
    if upper in field.names:
        return field.names.index(upper) + field.first_name_value
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number{' or a name' if field.names else ''}")
    number = int(text)
    if not field.low <= number <= field.high:
        raise ValueError(f"{number} is outside {field.low}-{field.high}")
    return number


def _item_values(item: str, field: Field) -> range:
    """The numbers one item of a field matches (`*`, `N`, `A-B`, each with an optional
    `/STEP`); ValueError saying what is wrong with it."""
    base, slash, step = item.partition("/")
    if slash and (not step.isdigit() or int(step) < 1):
        raise ValueError(f"step {step!r} in {item!r} must be a positive number")
    stride = int(step) if slash else 1
    if base == "*":
        return range(field.low, field.high + 1, stride)
    low_text, dash, high_text = base.partition("-")
    low = _value(low_text, field)
    high = _value(high_text, field) if dash else (field.high if slash else low)
    if dash and high < low:
        raise ValueError(f"range {base!r} runs backwards")
    return range(low, high + 1, stride)


def _expand(value: str, field: Field) -> set[int]:
    """The numbers a checked field's `value` matches."""
    return {number for item in value.split(",") for number in _item_values(item, field)}


def _never_comes(day_of_month: str, month: str) -> bool:
    """Whether no month the field names has any of the days it names (`30 FEB`)."""
    days, months = _expand(day_of_month, FIELDS[2]), _expand(month, FIELDS[3])
    return min(days) > max(DAYS_IN_MONTH[number - 1] for number in months)


def validate_cron(schedule: str) -> str:
    """`schedule` stripped, or ConfigError naming what is wrong with it."""
    text = " ".join(schedule.split())
    problems = []
    match = _PREFIX.match(text + " ")
    body = text
    if match:
        zone = match.group(1)
        body = text[match.end() :].strip()
        try:
            zoneinfo.ZoneInfo(zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            problems.append(f"time zone {zone!r} is not an IANA zone (e.g. Europe/Paris)")
    fields = body.split()
    if not match and fields and "=" in fields[0]:
        problems.append(
            f"{fields[0]!r} is not a time zone: TZ=ZONE or CRON_TZ=ZONE, an IANA zone such as "
            "Europe/Paris, before the five fields"
        )
        fields = fields[1:]
    if len(fields) != len(FIELDS):
        problems.append(
            f"{len(fields)} fields; cron needs 5: minute hour day-of-month month day-of-week "
            "(e.g. '0 3 * * 1', optionally prefixed 'TZ=Europe/Paris ')"
        )
    else:
        for field, value in zip(FIELDS, fields, strict=True):
            for item in value.split(","):
                try:
                    _item_values(item, field)
                except ValueError as exc:
                    problems.append(f"{field.name} {value!r}: {exc}")
        # With the day of week left open, the day of month alone decides (unix cron).
        day_of_month, month, day_of_week = fields[2:]
        if not problems and day_of_week == "*" and _never_comes(day_of_month, month):
            problems.append(
                f"day of month {day_of_month!r} never comes in month {month!r}: the schedule "
                "would never start a run"
            )
    if problems:
        raise ConfigError(problems, source=f"--schedule {schedule!r}")
    return text
