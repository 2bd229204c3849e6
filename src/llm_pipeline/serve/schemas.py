"""Request and response bodies of the predict route, with the limits that guard the model.

Requests follow Vertex AI's format: `{"instances": [...], "parameters": {...}}`, answered by
`{"predictions": [...]}`. What an instance may be, and which parameters a request may set,
is the served task's to say (`tasks.Task.serving_instance`, `serving_parameters`):
summarization takes a text or `{"text": ...}`, instruction tuning a prompt or
`{"messages": [...]}`, a classifier's task a text or `{"text": ..., "text_pair": ...}`.
Validation is strict (no "3" for 3) and every problem is reported with
where it is (`instances[1].messages[2].content: ...`): a client fixes its request from the
message alone. The server's settings (its task and limits) reach the validators through
pydantic's validation context (a `Settings`, read as `Limits`).
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llm_pipeline.config.errors import problem
from llm_pipeline.errors import json_type
from llm_pipeline.tasks import DEFAULT_TASK, Instance, InstanceError, Task, get_task

__all__ = ["GenerationParameters", "Limits", "PredictRequest", "json_type"]


class Limits(Protocol):
    """What the validators read of the server's settings (settings.py's `Settings`, which the
    predict route passes as the validation context). Named here, not imported: `Settings`
    holds this module's `GenerationParameters`, so settings.py sits above this module."""

    @property
    def task(self) -> str: ...
    @property
    def parameters(self) -> GenerationParameters: ...
    @property
    def max_instances(self) -> int: ...
    @property
    def max_text_chars(self) -> int: ...
    @property
    def max_new_tokens_limit(self) -> int: ...
    @property
    def num_beams_limit(self) -> int: ...
    @property
    def temperature_limit(self) -> float: ...
    @property
    def stop_limit(self) -> int: ...
    @property
    def stop_chars_limit(self) -> int: ...


def _limits(info: ValidationInfo) -> Limits | None:
    """The server's limits, from the validation context."""
    limits: Limits | None = info.context
    return limits


class GenerationParameters(BaseModel):
    """Settings a request may choose (how to generate, or how many labels to answer); unset
    ones keep the server's defaults.

    One model for every task; the served task says which of them a request may set
    (`Task.serving_parameters`), and the others are refused as unknown keys. Frozen and
    hashable: the batcher runs only requests with equal parameters in one model call.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    max_new_tokens: int | None = Field(default=None, ge=1, description="Longest output, in tokens.")
    min_new_tokens: int | None = Field(default=None, ge=0, description="Shortest summary.")
    num_beams: int | None = Field(default=None, ge=1, description="Beam width; 1 is greedy.")
    length_penalty: float | None = Field(
        default=None, allow_inf_nan=False, description="Beam length penalty (>1: longer)."
    )
    no_repeat_ngram_size: int | None = Field(
        default=None, ge=0, le=64, description="Forbid repeating n-grams of this size; 0: off."
    )
    temperature: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="Sampling temperature; 0 or unset is greedy (the same answer every time).",
    )
    top_p: float | None = Field(
        default=None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Nucleus sampling: sample from the likeliest tokens holding this much "
        "probability; needs temperature above 0.",
    )
    stop: tuple[str, ...] | None = Field(
        default=None,
        description="A string or list of strings; the completion ends before the first of "
        "them it produces.",
    )
    stream: bool | None = Field(
        default=None,
        description='Answer with server-sent events as the text is written (`{"text"}` '
        'deltas, then `{"predictions"}`), for one instance; what Vertex AI\'s '
        "streamRawPredict carries.",
    )
    # Bounded by the loaded model's number of labels (`ServedModel.check_parameters`), so
    # that 0 and too many get the same message naming the range.
    top_k: int | None = Field(
        default=None,
        description="Answer the k likeliest labels with their scores, highest first "
        "(1 to the model's number of labels); unset: the predicted label (multi-label: "
        "those whose score reaches the model's threshold).",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _task_takes_it(cls, value: Any, info: ValidationInfo) -> Any:
        limits = _limits(info)
        if limits is not None and value is not None:
            allowed = get_task(limits.task).serving_parameters
            if info.field_name not in allowed:
                raise problem(
                    f"not a parameter of task {limits.task!r} (it takes {', '.join(allowed)})"
                )
        return value

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_strings(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if not isinstance(stops, list) or not all(isinstance(stop, str) for stop in stops):
            raise problem(f"expected a string or a list of strings, got {json_type(value)}")
        if not stops or not all(stops):
            raise problem("stop strings must not be empty")
        limits = _limits(info)
        if limits is not None:
            if len(stops) > limits.stop_limit:
                raise problem(
                    f"{len(stops)} stop strings; this server's limit is {limits.stop_limit}"
                )
            longest = max(len(stop) for stop in stops)
            if longest > limits.stop_chars_limit:
                raise problem(
                    f"a stop string is {longest} characters; this server's limit is "
                    f"{limits.stop_chars_limit}"
                )
        return tuple(stops)

    @model_validator(mode="after")
    def _within_limits(self, info: ValidationInfo) -> Self:
        limits = _limits(info)
        if limits is not None:
            caps: dict[str, float] = {
                "max_new_tokens": limits.max_new_tokens_limit,
                "min_new_tokens": limits.max_new_tokens_limit,
                "num_beams": limits.num_beams_limit,
                "temperature": limits.temperature_limit,
            }
            for name, cap in caps.items():
                value = getattr(self, name)
                if value is not None and value > cap:
                    raise problem(f"{name} is {value}; this server's limit is {cap:g}")
            temperature = self.over(limits.parameters).temperature
            if self.top_p is not None and not temperature:
                raise problem(
                    f"top_p ({self.top_p:g}) applies only when sampling: set temperature "
                    "above 0 (unset or 0 is greedy)"
                )
        low, high = self.min_new_tokens, self.max_new_tokens
        if low is not None and high is not None and low > high:
            raise problem(f"min_new_tokens ({low}) is above max_new_tokens ({high})")
        return self

    def over(self, defaults: GenerationParameters) -> GenerationParameters:
        """These parameters with `defaults` filling the unset ones."""
        return defaults.model_copy(update=self.model_dump(exclude_none=True))


def _instance(value: Any, info: ValidationInfo) -> Instance:
    """One instance, checked by the served task and against the server's length limit."""
    limits = _limits(info)
    task = _task(info)
    try:
        instance = task.serving_instance(value)
    except InstanceError as exc:
        raise problem(exc.what, exc.where) from None
    chars = task.instance_chars(instance)
    if limits is not None and chars > limits.max_text_chars:
        raise problem(f"text is {chars} characters; the limit is {limits.max_text_chars}")
    return instance


def _task(info: ValidationInfo) -> Task:
    limits = _limits(info)
    return get_task(limits.task if limits is not None else DEFAULT_TASK)


class PredictRequest(BaseModel):
    """`{"instances": [...], "parameters": {...}}`; instances come out checked (texts or
    chats, as the served task takes them)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    instances: list[Annotated[Instance, PlainValidator(_instance)]] = Field(
        description="What to run the model on, as the served task takes it."
    )
    parameters: GenerationParameters = Field(
        default_factory=GenerationParameters, description="Generation settings for all of them."
    )

    @model_validator(mode="before")
    @classmethod
    def _instances_given(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, dict) and "instances" not in value:
            shape = _task(info).serving_instance_shape
            raise problem(f"required, but not given ({shape})", ("instances",))
        return value

    @field_validator("instances", mode="before")
    @classmethod
    def _count(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list):
            raise problem(f"expected {_task(info).serving_instance_shape}, got {json_type(value)}")
        if not value:
            raise problem("empty; send at least one instance")
        limits = _limits(info)
        if limits is not None and len(value) > limits.max_instances:
            raise problem(
                f"{len(value)} instances; the limit is {limits.max_instances} per request"
            )
        return value
