"""The engine a step generates with: the one the endpoint will serve with (`deploy.engine`).

The evaluate step scores through it and the deploy step converts and registers it, so both
ask here, with the same answer for the same model and config.
"""

from __future__ import annotations

from llm_pipeline.config import DeployConfig
from llm_pipeline.engines import EngineChoice, engine_for
from llm_pipeline.errors import UserError
from llm_pipeline.tasks import Task


def serving_engine(
    deploy: DeployConfig, model_dir: str, task: Task, *, error: type[UserError]
) -> EngineChoice:
    """The engine and precision the endpoint for `deploy` serves `model_dir` with: on a GPU
    where the endpoint has one (Vertex: `deploy.accelerator_count`; locally: this machine's),
    else on a CPU. Raises `error` with the config's reason where the engine cannot be had."""
    import torch

    from llm_pipeline.models.generation import native_bf16

    vertex = deploy.target == "vertex"
    gpu = deploy.accelerator_count > 0 if vertex else torch.cuda.is_available()
    try:
        return engine_for(
            model_dir,
            generates=task.model_kind.generates,
            requested=deploy.engine,
            compute_type=deploy.engine_compute_type,
            gpu=gpu,
            accelerator_type=deploy.accelerator_type,
            gpu_bf16=None if vertex or not gpu else native_bf16(),
        )
    except ValueError as exc:
        raise error(str(exc)) from None
