"""Request and response bodies of the predict route, with the limits that guard the model.

Requests follow Vertex AI's format: `{"instances": [...], "parameters": {...}}`, answered by
`{"predictions": [...]}`. An instance is a text or `{"text": ...}`. Validation is strict
(no "3" for 3) and every problem is reported with where it is (`instances[3]: ...`): a
client fixes its request from the message alone. The server's limits reach the validators
through pydantic's validation context (a `Settings`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from llm_pipeline.errors import json_path

if TYPE_CHECKING:
    from llm_pipeline.serve.settings import Settings

_PROBLEM = "serve_problem"
_SHAPE = 'a list of texts or {"text": ...} objects'


def _problem(message: str) -> PydanticCustomError:
    # The message goes in as a value: a template would read the braces of {"text"}.
    return PydanticCustomError(_PROBLEM, "{message}", {"message": message})


def _limits(info: ValidationInfo) -> Settings | None:
    """The server's settings, which the predict route passes as the validation context."""
    limits: Settings | None = info.context
    return limits


class GenerationParameters(BaseModel):
    """Generation settings a request may choose; unset ones keep the server's defaults."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    max_new_tokens: int | None = Field(default=None, ge=1, description="Longest summary.")
    min_new_tokens: int | None = Field(default=None, ge=0, description="Shortest summary.")
    num_beams: int | None = Field(default=None, ge=1, description="Beam width; 1 is greedy.")
    length_penalty: float | None = Field(
        default=None, allow_inf_nan=False, description="Beam length penalty (>1: longer)."
    )
    no_repeat_ngram_size: int | None = Field(
        default=None, ge=0, le=64, description="Forbid repeating n-grams of this size; 0: off."
    )

    @model_validator(mode="after")
    def _within_limits(self, info: ValidationInfo) -> Self:
        limits = _limits(info)
        if limits is not None:
            caps = {
                "max_new_tokens": limits.max_new_tokens_limit,
                "min_new_tokens": limits.max_new_tokens_limit,
                "num_beams": limits.num_beams_limit,
            }
            for name, cap in caps.items():
                value = getattr(self, name)
                if value is not None and value > cap:
                    raise _problem(f"{name} is {value}; this server's limit is {cap}")
        low, high = self.min_new_tokens, self.max_new_tokens
        if low is not None and high is not None and low > high:
            raise _problem(f"min_new_tokens ({low}) is above max_new_tokens ({high})")
        return self

    def over(self, defaults: GenerationParameters) -> GenerationParameters:
        """These parameters with `defaults` filling the unset ones."""
        return defaults.model_copy(update=self.model_dump(exclude_none=True))


def _instance_text(value: Any, info: ValidationInfo) -> str:
    """The text of one instance: a string, or an object holding only "text"."""
    if isinstance(value, dict):
        extra = sorted(set(value) - {"text"})
        if extra:
            raise _problem(f'unknown key {extra[0]!r}; an instance object holds only "text"')
        if "text" not in value:
            raise _problem('an instance object needs "text"')
        value = value["text"]
        if not isinstance(value, str):
            raise _problem(f"text must be a string, got {json_type(value)}")
    elif not isinstance(value, str):
        raise _problem(f'expected a string or an object {{"text": string}}, got {json_type(value)}')
    if not value.strip():
        raise _problem("text is empty")
    limits = _limits(info)
    if limits is not None and len(value) > limits.max_text_chars:
        raise _problem(f"text is {len(value)} characters; the limit is {limits.max_text_chars}")
    return value


class PredictRequest(BaseModel):
    """`{"instances": [...], "parameters": {...}}`; instances come out as plain texts."""

    model_config = ConfigDict(extra="forbid", strict=True)

    instances: list[Annotated[str, PlainValidator(_instance_text)]] = Field(
        description=f"What to summarize: {_SHAPE}."
    )
    parameters: GenerationParameters = Field(
        default_factory=GenerationParameters, description="Generation settings for all of them."
    )

    @field_validator("instances", mode="before")
    @classmethod
    def _count(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list):
            raise _problem(f"expected {_SHAPE}, got {json_type(value)}")
        if not value:
            raise _problem("empty; send at least one instance")
        limits = _limits(info)
        if limits is not None and len(value) > limits.max_instances:
            raise _problem(
                f"{len(value)} instances; the limit is {limits.max_instances} per request"
            )
        return value


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    names.update({list: "array", dict: "object", type(None): "null"})
    return names.get(type(value), type(value).__name__)


def describe_errors(
    exc: ValidationError, *, name: Callable[[tuple[str | int, ...]], str] = json_path
) -> list[str]:
    """One `where: what` line per problem pydantic found."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        where = name(loc) if loc else "request body"
        kind, message = error["type"], error["msg"]
        if kind == _PROBLEM:
            what = message
        elif kind == "missing":
            what = f"required ({_SHAPE})" if loc == ("instances",) else "required"
        elif kind == "extra_forbidden":
            known = GenerationParameters if loc[:1] == ("parameters",) else PredictRequest
            what = f"unknown key; expected one of {', '.join(known.model_fields)}"
        elif kind in {"model_type", "dict_type", "model_attributes_type"}:
            what = f"expected an object, got {json_type(error['input'])}"
        else:
            value = error.get("input")
            shown = f"{value!r}"[:40]
            what = f"{message[:1].lower()}{message[1:]}, got {json_type(value)} {shown}"
        problems.append(f"{where}: {what}")
    return problems
