"""The prediction server's settings, read once from the environment.

Vertex AI's custom container contract fixes the `AIP_*` variables (port, routes, where the
model's files are); the server's own limits and defaults are `LLM_PIPELINE_SERVE_*`
variables, so the deploy step can set them per model version (`serving_env`) and a
container needs no flags. Every field below names its variable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from llm_pipeline.config.errors import problem, problems_from
from llm_pipeline.engines.choice import COMPUTE_TYPES
from llm_pipeline.errors import ServeError, load_json
from llm_pipeline.serve.schemas import GenerationParameters
from llm_pipeline.tasks import DEFAULT_TASK, TASKS

#: Prefix of the server's own variables.
PREFIX = "LLM_PIPELINE_SERVE_"
#: Vertex AI refuses online prediction requests over 1.5 MB; so does this server.
MAX_BODY_BYTES = 1_572_864
#: Longest input read when neither the settings nor the tokenizer give a smaller limit.
MAX_INPUT_TOKENS_CAP = 1024
#: Addresses that reach only this machine: a server bound to one of them checks Host headers.
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

#: Fields that Vertex's contract names; every other field is PREFIX + its name in capitals.
_VERTEX_NAMES = {
    "port": "AIP_HTTP_PORT",
    "health_route": "AIP_HEALTH_ROUTE",
    "predict_route": "AIP_PREDICT_ROUTE",
    "model_uri": "AIP_STORAGE_URI",
}


class Settings(BaseModel):
    """What the server serves, where, and within which limits."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    model_uri: str | None = Field(
        default=None,
        description="The model folder: a local path or gs:// (copied down whole, subfolders "
        "included); `--model` overrides it.",
    )
    task: str = Field(
        default=DEFAULT_TASK,
        description="The task the model was trained for (the config's `task`): it decides the "
        "kind of model loaded (seq2seq, causal LM or classifier), what an instance may be, which "
        "parameters a request may set, and the page at `/`.",
    )
    host: str = Field(
        default="127.0.0.1",
        description="Address to listen on (`--host` only); unset: 0.0.0.0 where AIP_HTTP_PORT "
        "is set (a container, whose port is reached from outside it), else 127.0.0.1.",
    )
    port: int = Field(
        default=8080, ge=1, le=65535, description="Port to listen on; `--port` overrides it."
    )
    health_route: str = Field(
        default="/health",
        pattern=r"^/",
        description="Answers 200 once the model is loaded, 503 before.",
    )
    predict_route: str = Field(
        default="/predict",
        pattern=r"^/",
        description="Takes `{instances, parameters}`, answers `{predictions}`.",
    )
    max_batch_size: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="Most instances in one model call (a generate call or a forward pass).",
    )
    max_wait_ms: float = Field(
        default=10.0,
        ge=0,
        le=10_000,
        description="How long the oldest queued instance waits for others to fill its batch.",
    )
    batching: bool = Field(
        default=True,
        description="Coalesce concurrent requests into shared model calls; `false` runs "
        "each request on its own (a baseline for benchmarks).",
    )
    max_instances: int = Field(default=64, ge=1, description="Most instances per request.")
    max_text_chars: int = Field(default=20_000, ge=1, description="Longest instance text.")
    max_input_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Inputs are cut to this many tokens (training's max_source_length, or "
        "max_length: a chat's prompt loses its start, never the latest turn, and a pair of "
        "texts to classify loses tokens from the longer text first); unset: the tokenizer's "
        f"limit, at most {MAX_INPUT_TOKENS_CAP}.",
    )
    chat_template: str | None = Field(
        default=None,
        description="The Jinja chat template training rendered chats with when the "
        "tokenizer has none (the config's `data.chat_template`); unset: the plain "
        "`### Instruction:` / `### Response:` layout. The tokenizer's own always wins.",
    )
    source_prefix: str = Field(
        default="", description="Put before every text, as training did (`summarize: ` for T5)."
    )
    max_new_tokens_limit: int = Field(
        default=256,
        ge=1,
        description="Largest max_new_tokens (and min_new_tokens) a request may ask.",
    )
    num_beams_limit: int = Field(
        default=8, ge=1, description="Largest num_beams a request may ask."
    )
    temperature_limit: float = Field(
        default=2.0, ge=0, description="Largest temperature a request may ask."
    )
    stop_limit: int = Field(default=4, ge=1, description="Most stop strings a request may give.")
    stop_chars_limit: int = Field(default=64, ge=1, description="Longest stop string.")
    parameters: GenerationParameters = Field(
        default_factory=GenerationParameters,
        description='Default request parameters as JSON, e.g. `{"num_beams": 4}`; unset '
        "ones keep the model's generation config.",
    )
    token: SecretStr | None = Field(
        default=None,
        description="A bearer token: when set, the predict route and `/stats` answer 401 "
        "without `Authorization: Bearer TOKEN` (the health route never asks; the page at `/` "
        "asks for it once). Vertex AI authenticates callers itself; this is for servers "
        "run elsewhere.",
    )
    max_queued_instances: int = Field(
        default=256,
        ge=1,
        description="Most instances waiting for the model; a request that would queue more "
        "is answered 503 with `Retry-After`.",
    )
    max_requests_in_flight: int = Field(
        default=64,
        ge=1,
        description="Most predict requests being read, queued or run at once; more are "
        "answered 503 with `Retry-After` before their body is read.",
    )
    max_connections: int = Field(
        default=256,
        ge=1,
        description="Most open connections; one more is answered 503 and closed at once.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="A connection that has not sent a whole request head this long after it "
        "opened (or after its previous answer) is closed.",
    )
    body_timeout_s: float = Field(
        default=20.0,
        gt=0,
        description="A request whose body is not whole this long after its head is closed "
        "(1.5 MB at 1 Mbit/s takes 12 s).",
    )
    shutdown_timeout_s: int = Field(
        default=20,
        ge=1,
        description="On SIGTERM, the longest wait for requests in flight; those still running "
        "are then answered 503. With the 5 s given to the model call running then, the "
        "server is gone within 25 s of SIGTERM: inside the 30 s a Kubernetes pod (which a "
        "Vertex AI prediction node is) gets by default before SIGKILL.",
    )
    device: str | None = Field(
        default=None, description="Torch device, e.g. `cpu` or `cuda:0`; unset: GPU if any."
    )
    engine: Literal["transformers", "ctranslate2"] = Field(
        default="transformers",
        description="What generates: `transformers` (the model's own `generate`), or "
        "`ctranslate2` (its CTranslate2 form, which the deploy step registers in the model "
        "folder's `engine/`; made at start-up, and checked, if the folder lacks it). The "
        "deploy step sets it from `deploy.engine`. A classifier is always transformers.",
    )
    compute_type: str | None = Field(
        default=None,
        description="CTranslate2's precision (`int8`, `float32`, `bfloat16`, ...); unset: int8.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        default=None,
        description="Weights' dtype; unset: bf16 on GPUs with native bf16 (compute "
        "capability 8.0 and up), else fp32.",
    )

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        if value not in TASKS:
            raise problem(f"unknown task {value!r}; known tasks: {', '.join(sorted(TASKS))}")
        return value

    @field_validator("compute_type")
    @classmethod
    def _known_compute_type(cls, value: str | None) -> str | None:
        if value is not None and value not in COMPUTE_TYPES:
            raise problem(f"unknown compute type {value!r}; known: {', '.join(COMPUTE_TYPES)}")
        return value

    @field_validator("parameters")
    @classmethod
    def _task_takes_them(cls, value: GenerationParameters, info: ValidationInfo) -> Any:
        task = info.data.get("task")  # absent when the task itself was refused
        if isinstance(task, str) and task in TASKS:
            allowed = TASKS[task].serving_parameters
            unknown = [name for name in value.model_fields_set if name not in allowed]
            if "stream" in value.model_fields_set:
                raise problem(
                    "stream: each request chooses it (a client that reads JSON cannot read a "
                    "stream), not the server's defaults"
                )
            if unknown:
                raise problem(
                    f"{', '.join(sorted(unknown))}: not a parameter of task {task!r} "
                    f"(it takes {', '.join(name for name in allowed if name != 'stream')})"
                )
        return value

    @property
    def max_wait_s(self) -> float:
        """`max_wait_ms` in seconds."""
        return self.max_wait_ms / 1000.0

    @property
    def on_loopback(self) -> bool:
        """Whether only this machine can connect (so a Host header naming another is a
        browser page's DNS rebinding, not a client of this server)."""
        return self.host in LOOPBACK or self.host.startswith("127.")


def env_name(field: str) -> str:
    """The environment variable that sets `field`."""
    return _VERTEX_NAMES.get(field, PREFIX + field.upper())


def load_settings(environ: Mapping[str, str], **overrides: Any) -> Settings:
    """Settings from `environ`, with `overrides` (command-line values) on top.

    Raises ServeError listing every bad variable with its value.
    """
    values: dict[str, Any] = {}
    for field in Settings.model_fields:
        raw = environ.get(env_name(field))
        if raw is None or field == "host":
            continue
        if field == "parameters":
            try:
                values[field] = load_json(raw)
            except ValueError as exc:  # json.JSONDecodeError, JSONTooDeep
                raise ServeError(f"{env_name(field)}: not JSON ({exc}): {raw!r}") from None
        else:
            values[field] = raw if raw != "" or field in {"source_prefix", "model_uri"} else None
    values.update({key: value for key, value in overrides.items() if value is not None})
    if "host" not in values:  # outside a container, only this machine may connect
        values["host"] = "0.0.0.0" if environ.get(env_name("port")) else "127.0.0.1"
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        problems = problems_from(exc, Settings, name=lambda loc: _loc_name(loc, overrides))
        raise ServeError("bad server settings: " + "; ".join(problems)) from None


def serving_env(
    *,
    task: str | None = None,
    prefix: str = "",
    max_input_tokens: int | None = None,
    chat_template: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    engine: str = "transformers",
    compute_type: str | None = None,
) -> dict[str, str]:
    """The environment that makes the server load the model of `task`'s kind and read its
    inputs as training did.

    The deploy step stores it with the model version; the serving container gets it.
    """
    env: dict[str, str] = {}
    if task is not None:
        env[env_name("task")] = task
    if prefix:
        env[env_name("source_prefix")] = prefix
    if max_input_tokens is not None:
        env[env_name("max_input_tokens")] = str(max_input_tokens)
    if chat_template is not None:
        env[env_name("chat_template")] = chat_template
    if parameters:
        env[env_name("parameters")] = json.dumps(dict(parameters))
    if engine != "transformers":
        env[env_name("engine")] = engine
    if compute_type is not None:
        env[env_name("compute_type")] = compute_type
    return env


def settings_markdown() -> str:
    """Every variable the server reads, its default and meaning, as a Markdown table."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for field, info in Settings.model_fields.items():
        if field == "host":
            continue
        default = info.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump(exclude_none=True) or None
        shown = "unset" if default is None else f"`{json.dumps(default)}`"
        rows.append(f"| `{env_name(field)}` | {shown} | {info.description} |")
    return "\n".join(rows)


def _loc_name(loc: tuple[str | int, ...], overrides: Mapping[str, Any]) -> str:
    field = str(loc[0]) if loc else ""
    if field in overrides and overrides[field] is not None:
        return f"--{field.replace('_', '-')}"
    rest = "".join(f".{part}" for part in loc[1:])
    return env_name(field) + rest
