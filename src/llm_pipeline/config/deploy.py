"""Whether a model ships, and where."""

import re
from typing import Literal, Self

from pydantic import Field, ValidationInfo, field_validator, model_validator

from llm_pipeline.config.base import Section

#: Local registry names become folder and file names: no separators, no `..`, no hidden
#: names (the registry's temp files are hidden).
LOCAL_NAME_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"
LOCAL_NAME_RULE = "letters, digits, '-', '_' and '.', at most 128 characters, not starting with '.'"
#: Vertex AI Model and Endpoint display names: 1 to 128 characters, any UTF-8
#: (aiplatform.googleapis.com, `Model.display_name`, `Endpoint.display_name`).
VERTEX_DISPLAY_NAME_LENGTH = 128
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def registry_name_problem(name: str, target: str) -> str | None:
    """Why `name` cannot name a model or endpoint in the `target` registry, or None."""
    if target == "local":
        if re.fullmatch(LOCAL_NAME_PATTERN, name):
            return None
        return f"{name!r} is not a local registry name: use {LOCAL_NAME_RULE}"
    if not name.strip():
        return "is empty; Vertex AI needs a display name"
    if len(name) > VERTEX_DISPLAY_NAME_LENGTH:
        return (
            f"{name!r} is {len(name)} characters; Vertex AI display names are at most "
            f"{VERTEX_DISPLAY_NAME_LENGTH}"
        )
    if _CONTROL.search(name):
        return f"{name!r} holds a control character; Vertex AI display names are plain text"
    return None


#: CTranslate2's precisions (`deploy.engine_compute_type`); `engines.choice` reads them here.
ComputeType = Literal[
    "auto",
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "float32",
    "float16",
    "bfloat16",
]


class DeployPolicyConfig(Section):
    """The gate: compare the new model with the one the endpoint serves now."""

    metric: str | None = Field(
        default=None,
        description="Metric that decides; `null`: the task's own (summarization `rougeLsum`, "
        "instruction_tuning `rougeL`, text_classification `macro_f1`, preference_tuning "
        "`preference_accuracy`).",
    )
    min_improvement: float = Field(
        default=0.0, description="Deploy only if the metric beats the served model by this much."
    )
    floors: dict[str, float] = Field(
        default_factory=dict,
        description='Minimum value per metric, e.g. `{"rouge1": 30}`; any miss blocks deploy. '
        "A task adds its own for metrics not named here (preference_tuning: "
        '`{"rougeL_change": -2}`, its responses may lose at most 2 ROUGE-L points against the '
        "starting model's).",
    )
    override: Literal["auto", "always", "never"] = Field(
        default="auto", description="`always`/`never` force the decision (the reason says so)."
    )
    deploy_if_nothing_served: bool = Field(
        default=True,
        description="Deploy (floors permitting) when the endpoint serves nothing yet, or "
        "nothing the gate can compare with (scored on other evaluation rows); `false` leaves "
        "such a deploy to a person.",
    )


class DeployConfig(Section):
    """Model registry and endpoint."""

    target: Literal["local", "vertex"] = Field(
        default="local",
        description="`local`: a registry folder and a local endpoint; `vertex`: Vertex AI "
        "Model Registry and Endpoints.",
    )
    model_display_name: str = Field(
        default="summarizer", description="Registered model name (versions go under it)."
    )
    endpoint_display_name: str | None = Field(
        default=None, description="Endpoint name; defaults to `<model_display_name>-endpoint`."
    )
    registry_dir: str = Field(
        default="runs/registry",
        description="Local registry folder (target `local`), relative to the working directory.",
    )
    machine_type: str = Field(default="n1-standard-8", description="Serving machine type.")
    accelerator_type: str | None = Field(
        default=None, description="Serving accelerator, e.g. NVIDIA_TESLA_T4; `null` for CPU."
    )
    accelerator_count: int = Field(default=0, ge=0, description="Accelerators per replica.")
    min_replica_count: int = Field(default=1, ge=1, description="Minimum serving replicas.")
    max_replica_count: int = Field(default=1, ge=1, description="Maximum serving replicas.")
    traffic_percent: int = Field(
        default=100,
        ge=1,
        le=100,
        description="Traffic the new version takes once healthy: 100 moves all of it and "
        "retires the previous version; less is a canary beside the previous version.",
    )
    health_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="How long the new version may take to load and answer its health route "
        "(locally: the test server; on Vertex: the deployModel operation).",
    )
    engine: Literal["auto", "transformers", "ctranslate2", "vllm"] = Field(
        default="auto",
        description="What generates the endpoint's texts, and the evaluate step's, so the gate "
        "scores what users get. `auto`: CTranslate2 for a model it converts (T5, BART, Llama, "
        "Qwen, Gemma, Mistral, OPT, GPT-2, ...), transformers for the rest (the demos' "
        "warm-started BERT models) and for a classifier's forward pass; `transformers` and "
        "`ctranslate2` force one (a model CTranslate2 cannot take is refused naming its "
        "architecture). `vllm` is not available in this version.",
    )
    engine_compute_type: ComputeType = Field(
        default="auto",
        description="CTranslate2's precision. `auto`: int8 on a CPU; on a GPU bfloat16, or "
        "where the GPU only emulates bf16 (T4, V100, P100) float16 for a decoder-only model "
        "and float32 for a T5. The evaluate step reports int8's ROUGE beside transformers' "
        "float32 on the same rows.",
    )
    probe_instances: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Evaluation documents sent as predictions before traffic moves.",
    )

    @field_validator("model_display_name", "endpoint_display_name")
    @classmethod
    def _registry_names(cls, name: str | None, info: ValidationInfo) -> str | None:
        target = info.data.get("target")
        problem = registry_name_problem(name, target) if name is not None and target else None
        if problem:
            raise ValueError(problem)
        return name

    @model_validator(mode="after")
    def _derived_endpoint_name(self) -> Self:
        if self.endpoint_display_name is None:
            problem = registry_name_problem(self.endpoint_name(), self.target)
            if problem:
                raise ValueError(
                    f"the endpoint named after model_display_name, {problem}; shorten "
                    "deploy.model_display_name or set deploy.endpoint_display_name"
                )
        return self

    @field_validator("engine")
    @classmethod
    def _engine_built(cls, engine: str) -> str:
        if engine == "vllm":
            raise ValueError(
                "'vllm' is not available in this version (its own environment and image are "
                "not built yet); use 'auto' or 'ctranslate2'"
            )
        return engine

    @model_validator(mode="after")
    def _replicas_in_order(self) -> Self:
        if self.max_replica_count < self.min_replica_count:
            raise ValueError(
                f"deploy.max_replica_count ({self.max_replica_count}) must be >= "
                f"min_replica_count ({self.min_replica_count})"
            )
        return self

    def endpoint_name(self) -> str:
        """The endpoint's display name (`endpoint_display_name`, else `<model>-endpoint`)."""
        return self.endpoint_display_name or f"{self.model_display_name}-endpoint"
