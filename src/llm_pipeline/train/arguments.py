"""The Trainer's arguments for one process: the config, the DeepSpeed settings, the
checkpoint layout and the world size, put together."""

from __future__ import annotations

import torch.distributed as dist
from transformers import TrainingArguments

from llm_pipeline.fit.shapes import ShapeUnavailable, model_shape
from llm_pipeline.models.loading import hidden_size
from llm_pipeline.tasks import ModelKind
from llm_pipeline.train.checkpoint_sync import CheckpointLayout
from llm_pipeline.train.spec import WorkerSpec
from llm_pipeline.train.trainer import deepspeed_settings, training_arguments


def trainer_arguments(
    spec: WorkerSpec,
    layout: CheckpointLayout,
    *,
    precision: str,
    has_eval: bool,
    kind: ModelKind = "seq2seq",
) -> TrainingArguments:
    """Trainer arguments with the DeepSpeed config.

    Create them before loading the model: under ZeRO-3 their existence is what makes
    `from_pretrained` build the model already partitioned across ranks.
    """
    deepspeed = deepspeed_settings(
        spec.train,
        precision=precision,
        world_size=dist.get_world_size(),
        hidden_size=hidden_size(spec.model),
        largest_adapter=largest_adapter(spec, kind),
    )
    if deepspeed is not None and layout.save_on_each_node:
        # Each node's folder is its own: DeepSpeed then writes the files it keeps to the first
        # rank (ZeRO-1/2's module and scheduler state) on each node's first rank, not on
        # global rank 0 alone, so every node can load its copy.
        deepspeed.setdefault("checkpoint", {})["use_node_local_storage"] = True
    return training_arguments(
        spec.train,
        output_dir=layout.local_folder,
        precision=precision,
        deepspeed=deepspeed,
        save_on_each_node=layout.save_on_each_node,
        has_eval=has_eval,
        kind=kind,
    )


def largest_adapter(spec: WorkerSpec, kind: ModelKind) -> int | None:
    """Elements of the largest adapter matrix `train.lora` will add, None without LoRA.

    Counted from the model's config on the meta device (`fit.shapes`, as the fit check
    counts), because the DeepSpeed config must exist before the weights load; None where the
    config cannot be read (ZeRO-3 then keeps Hugging Face's persistence threshold).
    """
    if spec.train.lora is None:
        return None
    try:
        shape = model_shape(spec.model, kind=kind, lora=spec.train.lora)
    except ShapeUnavailable:
        return None
    return shape.adapters.largest_adapter if shape.adapters is not None else None
