"""The prediction server's largest batch, and a serving machine that holds a model.

The server batches concurrent requests (`serve/batching.py`): one generate call takes up to
`max_batch_size` instances, each with up to `num_beams_limit` beams (when the task lets a
request set `num_beams`, `Task.serving_parameters`; else the model's own) and
`max_new_tokens_limit` new tokens, reading at most `max_input_tokens` of each. The deploy
step sets only the input limit (training's max_source_length, or a causal LM's max_length;
`serve.settings.serving_env`);
the rest are the server's defaults, read here from the same settings model, so the check and
the server cannot drift apart. A classifier's batch is one forward pass: no beams, no new
tokens, each text read within the model's positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_pipeline.config import PipelineConfig
from llm_pipeline.engines import EngineChoice
from llm_pipeline.fit.estimates import generation_memory
from llm_pipeline.fit.machines import this_machine, vertex_place
from llm_pipeline.fit.memory import CUDA_HOST_RUNTIME_GIB, DTYPE_BYTES, GIB
from llm_pipeline.fit.places import auto_dtype
from llm_pipeline.fit.shapes import ModelShape
from llm_pipeline.serve.settings import MAX_INPUT_TOKENS_CAP, env_name, load_settings, serving_env
from llm_pipeline.tasks import get_task

#: Single-GPU serving machines, cheapest first, that `serving_alternative` proposes.
SERVING_MACHINES = (
    ("n1-standard-8", "NVIDIA_TESLA_T4"),
    ("g2-standard-8", "NVIDIA_L4"),
    ("a2-highgpu-1g", "NVIDIA_TESLA_A100"),
    ("a2-ultragpu-1g", "NVIDIA_A100_80GB"),
    ("a3-highgpu-1g", "NVIDIA_H100_80GB"),
)


#: Bytes per weight of a CTranslate2 form in each compute type.
ENGINE_WEIGHT_BYTES = {
    "int8": 1,
    "int8_float32": 1,
    "int8_float16": 1,
    "int8_bfloat16": 1,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
}
#: What a CTranslate2 compute type computes (and caches) in, as the estimates name dtypes.
ENGINE_ACTIVATIONS = {
    "int8": "fp32",
    "int8_float32": "fp32",
    "int8_float16": "fp16",
    "int8_bfloat16": "bf16",
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
}


@dataclass(frozen=True)
class EngineMemory:
    """What the serving engine changes in the estimates: its weights' bytes per parameter
    and the dtype its cache and activations take (None: transformers, as `Where` says)."""

    choice: EngineChoice
    weight_bytes: float | None = None
    dtype: str | None = None

    @property
    def label(self) -> str:
        return f"{self.choice.describe()}, " if self.weight_bytes is not None else ""


def endpoint_has_gpu(config: PipelineConfig, target: str) -> bool:
    """Whether the endpoint serves on a GPU, as the steps decide it (`steps.engine`):
    Vertex's by `deploy.accelerator_count`, a local one by this machine's GPUs, one served
    from inside a Vertex pipeline step on its CPU."""
    if config.deploy.target == "vertex":
        return config.deploy.accelerator_count > 0
    return target == "local" and this_machine().gpus > 0


def serving_engine(
    config: PipelineConfig, shape: ModelShape, *, gpu: bool, gpu_bf16: bool | None = None
) -> EngineMemory:
    """The engine `deploy.engine` gives the model of `shape` on the endpoint (`gpu`), with
    what it holds in memory. An engine the config forces that cannot take the model is the
    evaluate step's error to say: here it counts as transformers. `gpu_bf16`: whether a
    local GPU has native bf16 (None: `deploy.accelerator_type` says)."""
    from llm_pipeline.engines import ModelShape as EngineShape
    from llm_pipeline.engines import choose_engine

    deploy = config.deploy
    convertible = None
    if shape.kind.generates:
        from llm_pipeline.engines.ctranslate2_form import unsupported_reason

        saved = {"model_type": shape.model_type, "architectures": [shape.architecture]}
        convertible = unsupported_reason(saved)
    engine_shape = EngineShape(
        shape.model_type, shape.architecture, shape.kind.encoder_decoder, shape.kind.generates
    )
    try:
        choice = choose_engine(
            engine_shape,
            requested=deploy.engine,
            compute_type=deploy.engine_compute_type,
            gpu=gpu,
            accelerator_type=deploy.accelerator_type,
            gpu_bf16=gpu_bf16,
            convertible=convertible,
        )
    except ValueError:
        return EngineMemory(EngineChoice())
    if choice.compute_type is None:
        return EngineMemory(choice)
    return EngineMemory(
        choice, ENGINE_WEIGHT_BYTES[choice.compute_type], ENGINE_ACTIVATIONS[choice.compute_type]
    )


@dataclass(frozen=True)
class ServerBatch:
    """The largest generate call the deployed server makes."""

    batch: int
    beams: int
    source: int
    new_tokens: int
    batch_variable: str  # the variable that sets `batch`


def server_batch(config: PipelineConfig, shape: ModelShape) -> ServerBatch:
    """The server's limits for the model this config deploys, as the deploy step sets them."""
    data = config.data
    # Each task reads its own input limit (the config refuses the other task's), as the
    # deploy step passes it.
    env = serving_env(
        task=config.task,
        prefix=data.prefix,
        max_input_tokens=data.max_source_length or data.max_length,
    )
    settings = load_settings(env)
    source = settings.max_input_tokens or MAX_INPUT_TOKENS_CAP
    if not shape.kind.generates:  # one forward pass, each text within the model's positions
        return ServerBatch(
            batch=settings.max_batch_size,
            beams=1,
            source=min(source, shape.max_positions or source),
            new_tokens=0,
            batch_variable=env_name("max_batch_size"),
        )
    asked = "num_beams" in get_task(config.task).serving_parameters
    return ServerBatch(
        batch=settings.max_batch_size,
        beams=settings.num_beams_limit if asked else shape.default_num_beams,
        source=source,
        new_tokens=settings.max_new_tokens_limit,
        batch_variable=env_name("max_batch_size"),
    )


def serving_alternative(shape: ModelShape, limits: ServerBatch) -> str | None:
    """The cheapest machine of SERVING_MACHINES that holds the model and its largest batch,
    as the deploy settings to write; None when none does."""
    for machine_type, accelerator in SERVING_MACHINES:
        place = vertex_place(machine_type, accelerator, 1, key="deploy")
        assert place.accelerator is not None
        dtype = auto_dtype(place)
        needs = generation_memory(
            shape,
            batch=limits.batch,
            beams=limits.beams,
            source=limits.source,
            new_tokens=limits.new_tokens,
            dtype=dtype,
            device="cuda",
        ).total
        host = CUDA_HOST_RUNTIME_GIB * GIB + shape.parameters * DTYPE_BYTES[dtype]
        if needs <= place.accelerator.memory_gib * GIB and host <= place.host_gib * GIB:
            return (
                f"deploy.machine_type {machine_type}, deploy.accelerator_type {accelerator}, "
                f"deploy.accelerator_count 1 (~{needs / GIB:.1f} GiB of "
                f"{place.accelerator.memory_gib:g} in {dtype})"
            )
    return None
