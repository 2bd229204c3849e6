"""Which engine generates a model's texts, and in what precision: `deploy.engine`.

The prediction server and the evaluate step both ask here, so the endpoint serves what the
gate scored. What decides, for `auto`:

* a model that generates (seq2seq or causal) in an architecture CTranslate2 converts
  (T5, BART, Llama, Qwen, Gemma, Mistral, OPT, GPT-2, ...): CTranslate2. On a CPU in int8
  (1.9-3.1x transformers' new tokens/s on this project's shapes, README "Serving engines"),
  on a GPU in bfloat16, or where the GPU only emulates bf16 (T4, V100, P100) in float16
  for a decoder-only model and float32 for a T5 (its activations overflow in fp16);
* a decoder-only model on a GPU would take vLLM (continuous batching, paged attention):
  that engine needs its own environment and image, which this version does not build yet,
  so `auto` says so and takes CTranslate2 (and the config refuses `deploy.engine: vllm`);
* anything else (the demos' warm-started BERT encoder-decoder and BERT decoder, a
  classifier's forward pass): transformers.

The choice is a plain record (`EngineChoice`): the deploy step stores it with the
registered version (as the server's environment), the evaluate step reports it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from llm_pipeline.config.deploy import ComputeType

#: What `deploy.engine` takes.
ENGINE_NAMES = ("auto", "transformers", "ctranslate2", "vllm")
#: CTranslate2 compute types `deploy.engine_compute_type` takes (besides `auto`).
COMPUTE_TYPES = tuple(name for name in get_args(ComputeType) if name != "auto")
#: Serving GPUs without native bf16 (compute capability below 8.0), by Vertex's names.
NO_NATIVE_BF16 = ("NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_P4")
#: Model types whose activations overflow in float16 (as `models.generation` says of T5).
FP16_OVERFLOWS = ("t5", "mt5", "umt5")

Engine = Literal["transformers", "ctranslate2"]


@dataclass(frozen=True)
class EngineChoice:
    """The engine that generates, its precision (CTranslate2's compute type; None for
    transformers, which keeps `models.generation.inference_dtype`), and why, in words."""

    engine: Engine = "transformers"
    compute_type: str | None = None
    reason: str = "the default"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> EngineChoice:
        return cls(**json.loads(text))

    def describe(self) -> str:
        """`ctranslate2 int8` or `transformers`."""
        return f"{self.engine} {self.compute_type}" if self.compute_type else self.engine


@dataclass(frozen=True)
class ModelShape:
    """What of a saved model's config.json decides its engine."""

    model_type: str
    architecture: str
    is_encoder_decoder: bool
    generates: bool

    @classmethod
    def of_config(cls, config: dict[str, Any], *, generates: bool) -> ModelShape:
        architectures = config.get("architectures") or []
        return cls(
            model_type=str(config.get("model_type", "")),
            architecture=str(architectures[0]) if architectures else "",
            is_encoder_decoder=bool(config.get("is_encoder_decoder", False)),
            generates=generates,
        )


def choose_engine(
    shape: ModelShape,
    *,
    requested: str = "auto",
    compute_type: str = "auto",
    gpu: bool = False,
    accelerator_type: str | None = None,
    gpu_bf16: bool | None = None,
    convertible: str | None = None,
) -> EngineChoice:
    """The engine for a model of `shape` served on a GPU (`gpu`, of `accelerator_type`,
    or one `gpu_bf16` says has native bf16 or not: a local GPU) or a CPU. `convertible` is
    why CTranslate2 cannot take the architecture (None: it can;
    `engines.ctranslate2_form.unsupported_reason` says). Raises ValueError, naming the
    setting, for an engine the model cannot run on."""
    if not shape.generates:
        if requested == "ctranslate2":
            raise ValueError(
                "deploy.engine: 'ctranslate2' generates texts; this task's model scores labels "
                "in one forward pass, which transformers runs: use 'auto' or 'transformers'"
            )
        return EngineChoice("transformers", None, "a classifier's forward pass")
    if requested == "transformers":
        return EngineChoice("transformers", None, "deploy.engine says so")
    if convertible is not None:
        if requested == "ctranslate2":
            raise ValueError(f"deploy.engine: 'ctranslate2' cannot take this model: {convertible}")
        return EngineChoice("transformers", None, f"CTranslate2 cannot take it: {convertible}")
    if gpu_bf16 is None:
        gpu_bf16 = accelerator_type not in NO_NATIVE_BF16
    chosen = (
        compute_type
        if compute_type != "auto"
        else _auto_compute_type(shape, gpu=gpu, bf16=gpu_bf16)
    )
    if requested == "ctranslate2":
        why = "deploy.engine says so"
    elif gpu and not shape.is_encoder_decoder:
        why = (
            f"a {shape.architecture} on a GPU; vLLM, the engine for that, is not built in "
            "this version"
        )
    else:
        where = "a GPU" if gpu else "a CPU"
        why = (
            f"CTranslate2 converts {shape.architecture or shape.model_type} and runs it on {where}"
        )
    return EngineChoice("ctranslate2", chosen, why)


def _auto_compute_type(shape: ModelShape, *, gpu: bool, bf16: bool) -> str:
    if not gpu:
        return "int8"
    if not bf16:
        return "float32" if shape.model_type in FP16_OVERFLOWS else "float16"
    return "bfloat16"
