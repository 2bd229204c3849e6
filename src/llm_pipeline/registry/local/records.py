"""What the local registry's JSON files may hold, and how a damaged one is reported.

The files are meant to be read (and, in an emergency, edited) by people, so every read
validates strictly: a wrong type, an unknown key, a traffic split that does not add up to
100 is a RegistryError that names the file and what is wrong in it, never a crash or a
silently wrong endpoint later.
"""

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)
from pydantic_core import PydanticSerializationError, to_jsonable_python

from llm_pipeline.config.deploy import LOCAL_NAME_PATTERN
from llm_pipeline.config.errors import problems_from
from llm_pipeline.registry.base import RegistryError
from llm_pipeline.storage import is_remote, to_uri

#: Model and endpoint names become folder and file names (the config checks them by the
#: same rule when it loads).
NAME_PATTERN = LOCAL_NAME_PATTERN
#: Versions are numbered 1, 2, 3, ...
NUMBER_PATTERN = r"^[1-9][0-9]*$"

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Number = Annotated[str, StringConstraints(pattern=NUMBER_PATTERN)]
Metric = Annotated[float, Field(allow_inf_nan=False)]  # JSON has no NaN


class _Record(BaseModel):
    """Strict types and no unknown keys: a hand edit that breaks either is caught on read."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class VersionRecord(_Record):
    """`version.json`: everything about a version except its number and files (the folder
    holding it gives those)."""

    created: AwareDatetime = Field(description="When it was registered (UTC).")
    source: str = Field(description="The model folder it was registered from.")
    run: str | None = Field(description="The pipeline run that made it.")
    metrics: dict[str, Metric] = Field(description="Evaluation metrics.")
    labels: dict[str, str] = Field(description="Free-form labels.")
    config: dict[str, Any] = Field(description="The resolved config that made it.")
    serving_env: dict[str, str] = Field(description="Environment for its prediction server.")
    pruned: AwareDatetime | None = Field(
        default=None,
        description="When `registry prune` deleted its files (absent: it has them).",
    )

    @property
    def created_iso(self) -> str:
        """`created` as ISO 8601 in UTC, the form ModelVersion carries."""
        return self.created.astimezone(UTC).isoformat()


class Share(_Record):
    """One version on an endpoint and its percent of the traffic."""

    model: Name
    version: Number
    traffic: int = Field(ge=0, le=100)

    @property
    def ref(self) -> str:
        return f"{self.model}@{self.version}"


def _check_split(shares: list[Share]) -> list[Share]:
    """An endpoint serves nothing (empty) or splits exactly 100% among distinct versions."""
    refs = [share.ref for share in shares]
    twice = sorted({ref for ref in refs if refs.count(ref) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} listed more than once")
    total = sum(share.traffic for share in shares)
    if shares and total != 100:
        raise ValueError(f"traffic adds up to {total}%, not 100%")
    return shares


Split = Annotated[list[Share], AfterValidator(_check_split)]


class Change(_Record):
    """One change of an endpoint's traffic, kept so it can be rolled back and audited."""

    time: AwareDatetime
    action: Literal["deploy", "rollback"]
    before: Split
    after: Split


class EndpointRecord(_Record):
    """`endpoints/<name>.json`: what the endpoint serves now and every change that led there."""

    deployed: Split = Field(description="The split now; empty: it serves nothing.")
    history: list[Change] = Field(description="Every change, oldest first.")


R = TypeVar("R", bound=_Record)


def now() -> datetime:
    """The time registry files record: UTC, to the microsecond (it orders versions)."""
    return datetime.now(UTC)


def load(path: Path, kind: type[R]) -> R:
    """Read and validate one registry file; RegistryError naming the file if it is damaged.

    FileNotFoundError passes through: whether a missing file is an error is the caller's call.
    """
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise damaged(path, ["not UTF-8 text"]) from None
    try:
        return kind.model_validate_json(text)
    except ValidationError as exc:
        raise damaged(path, problems_from(exc, kind)) from None


def dump(record: _Record) -> str:
    """A record as the indented JSON a person can read and diff; a field left at its
    default (a version's `pruned`, absent until it is pruned) is left out."""
    return record.model_dump_json(indent=2, exclude_defaults=True) + "\n"


def damaged(path: Path, problems: list[str]) -> RegistryError:
    """The error for a registry file that is unreadable or was edited into nonsense."""
    listed = "; ".join(problems)
    return RegistryError(
        f"registry file {path} is damaged: {listed} (fix it, or restore it from a backup)"
    )


def invalid_input(what: str, exc: ValidationError, kind: type[_Record]) -> RegistryError:
    """The error for values a caller passed that the registry cannot store."""
    return RegistryError(f"{what}: {'; '.join(problems_from(exc, kind))}")


def version_record(
    *,
    source: str,
    metrics: Mapping[str, float],
    run: str | None,
    config: Mapping[str, Any] | None,
    labels: Mapping[str, str] | None,
    serving_env: Mapping[str, str] | None,
) -> VersionRecord:
    """What `register` was given, validated before any file is copied.

    `created` is provisional: the registry sets it when it numbers the version, so the two
    orders agree. `config` becomes JSON here (Paths and the like as strings), and a local
    `source` an absolute path, so the record still says where it came from when read
    elsewhere.
    """
    try:
        config_json = to_jsonable_python(dict(config or {}))
    except PydanticSerializationError as exc:
        raise RegistryError(f"cannot register {source}: config is not JSON: {exc}") from None
    if not is_remote(source):
        source = str(Path(to_uri(source)).expanduser().absolute())
    try:
        return VersionRecord(
            created=now(),
            source=source,
            run=run,
            metrics=dict(metrics),
            labels=dict(labels or {}),
            config=config_json,
            serving_env=dict(serving_env or {}),
        )
    except ValidationError as exc:
        raise invalid_input(f"cannot register {source}", exc, VersionRecord) from None
