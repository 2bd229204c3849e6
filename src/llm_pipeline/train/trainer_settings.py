"""What the Trainer is told: the precision a run trains in (the config's choice checked
against this machine), the DeepSpeed config (built from `TrainConfig`, or the user's JSON with
its batch sizes filled in), the `TrainingArguments` of a finetune run, and how
`train.gradient_checkpointing` checkpoints. Pure builders from typed settings: the Trainer
itself, and what it adds, is `trainer.py`'s.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Seq2SeqTrainingArguments, TrainingArguments

from llm_pipeline.config import TrainConfig
from llm_pipeline.config.train import AUTO
from llm_pipeline.errors import TrainError
from llm_pipeline.models.generation import native_bf16
from llm_pipeline.tasks.kinds import SEQ2SEQ, ModelKind
from llm_pipeline.train import device_defaults
from llm_pipeline.train.deepspeed_config import (
    build_deepspeed_config,
    load_user_deepspeed_config,
    resolve_precision,
    zero3_section,
)
from llm_pipeline.train.spec import WorkerSpec

_BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")


def training_precision(spec: WorkerSpec) -> str:
    """ "bf16", "fp16" or "fp32": `train.precision` ("auto" picks) on the devices present."""
    cuda = torch.cuda.is_available()
    try:
        return resolve_precision(
            spec.train.precision,
            cuda_available=cuda,
            bf16_supported=native_bf16(),
        )
    except ValueError as err:
        raise TrainError(f"train.{err}") from err


def deepspeed_settings(
    train: TrainConfig,
    *,
    precision: str,
    world_size: int,
    hidden_size: int | None,
    largest_adapter: int | None = None,
) -> dict[str, Any] | None:
    """The DeepSpeed config for this run, or None without DeepSpeed (`train.use_deepspeed`
    false or `train.zero_stage` 0).

    `largest_adapter`: under `train.lora`, its largest adapter matrix, which ZeRO-3 then keeps
    whole on every rank (`build_deepspeed_config`).

    A user's JSON is used whole, except that "auto" batch sizes become numbers: filled by the
    Trainer on the CPU they come out wrong (it miscounts the world size there). A
    `zero_stage` of "auto" is resolved by the finetune job before any process starts
    (`train/zero_stage.py`); meeting it here is a caller's mistake.
    """
    if not train.deepspeed_on:
        return None
    micro, accumulation = train.per_device_batch_size, train.gradient_accumulation_steps
    if train.deepspeed_config is None:
        if train.zero_stage == AUTO:
            raise TrainError(
                'train.zero_stage "auto" reached a training process unresolved: '
                "run_finetune resolves it (train/zero_stage.py)"
            )
        return build_deepspeed_config(
            zero_stage=train.zero_stage,
            offload_optimizer=train.offload_optimizer,
            offload_param=train.offload_param,
            nvme_path=train.nvme_path,
            precision=precision,
            micro_batch_size=micro,
            gradient_accumulation_steps=accumulation,
            world_size=world_size,
            gradient_clipping=train.max_grad_norm,
            hidden_size=hidden_size,
            largest_adapter=largest_adapter if train.lora is not None else None,
        )
    try:
        config = load_user_deepspeed_config(train.deepspeed_config)
    except ValueError as err:
        raise TrainError(f"train.deepspeed_config: {err}") from err
    explicit = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accumulation,
        "train_batch_size": micro * accumulation * world_size,
    }
    for key in _BATCH_KEYS:
        if config.get(key, "auto") == "auto":
            config[key] = explicit[key]
    return config


def training_arguments(
    train: TrainConfig,
    *,
    output_dir: str,
    precision: str,
    deepspeed: dict[str, Any] | None,
    save_on_each_node: bool,
    has_eval: bool,
    kind: ModelKind = SEQ2SEQ,
    cuda: bool | None = None,
    keep_columns: bool = False,
) -> TrainingArguments:
    """Trainer arguments from `TrainConfig`; `output_dir` is where checkpoints are written.

    `Seq2SeqTrainingArguments` for an encoder-decoder `kind`, plain `TrainingArguments`
    for the others. Creating them starts the DeepSpeed config's life: with ZeRO-3, models loaded
    afterwards are partitioned as they load instead of materialised whole on every rank.
    `cuda` (default: whether this machine has a GPU) picks the GPU's data loading
    (`device_defaults`). `keep_columns`: the rows reach the collator whole, not cut to what
    the model's forward takes (a task's `training_columns`).
    """
    cuda = torch.cuda.is_available() if cuda is None else cuda
    on_cpu = not cuda
    device = device_defaults.loader_settings(
        cuda=cuda,
        cpus=device_defaults.node_cpus(),
        local_processes=device_defaults.local_processes(),
    ) | device_defaults.kernel_settings(train, kind=kind, cuda=cuda)
    eval_strategy = ("steps" if train.eval_steps else "epoch") if has_eval else "no"
    seq2seq: dict[str, Any] = {"predict_with_generate": False} if kind.encoder_decoder else {}
    arguments = Seq2SeqTrainingArguments if kind.encoder_decoder else TrainingArguments
    return arguments(
        output_dir=output_dir,
        num_train_epochs=train.epochs,
        max_steps=train.max_steps or -1,
        per_device_train_batch_size=train.per_device_batch_size,
        per_device_eval_batch_size=train.per_device_eval_batch_size or train.per_device_batch_size,
        gradient_accumulation_steps=train.gradient_accumulation_steps,
        learning_rate=train.learning_rate,
        weight_decay=train.weight_decay,
        lr_scheduler_type=train.lr_scheduler,
        # An integer is a step count, a float below 1 a share of the steps.
        warmup_steps=train.warmup_steps or train.warmup_ratio,
        max_grad_norm=train.max_grad_norm,
        # Smoothing is applied in token_mean_loss, which replaces the Trainer's own smoother.
        seed=train.seed,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        activation_checkpointing=train.gradient_checkpointing,
        activation_checkpointing_kwargs=activation_checkpointing_kwargs(train, deepspeed),
        deepspeed=deepspeed,
        use_cpu=on_cpu,
        ddp_backend="gloo" if on_cpu else None,
        ddp_timeout=train.collective_timeout_s,
        # Every parameter of the model takes part in each step; the search costs time.
        ddp_find_unused_parameters=False,
        eval_strategy=eval_strategy,
        eval_steps=train.eval_steps,
        logging_strategy="steps",
        logging_steps=train.logging_steps,
        save_strategy="steps",
        save_steps=train.save_steps,
        # Rotation is CompleteCheckpoints' job: the Trainer would count partial folders.
        save_total_limit=None,
        save_on_each_node=save_on_each_node,
        log_on_each_node=False,
        # TrainingStatus prints a line per logging period instead of tqdm's redrawn bar.
        disable_tqdm=True,
        report_to="none",
        label_names=["labels"],
        remove_unused_columns=not keep_columns,
        optim=device_defaults.OPTIMIZER,
        # Its NaN/inf check of every micro-batch's loss reads the loss back each time, making
        # the host wait for the GPU; a non-finite loss then shows in the logged mean instead.
        logging_nan_inf_filter=False,
        **device,
        **seq2seq,
    )


def activation_checkpointing_kwargs(
    train: TrainConfig, deepspeed: dict[str, Any] | None
) -> dict[str, Any] | None:
    """What the Trainer passes to `torch.utils.checkpoint` under `train.gradient_checkpointing`:
    reentrant checkpointing for LoRA under ZeRO-3, else None (transformers' default,
    non-reentrant).

    Why: while a backward runs, DeepSpeed 0.19.8 hands each frozen parameter that a forward
    hook fetches (a checkpointed layer's recomputation) to the newest module whose backward
    has started (`partitioned_param_coordinator.py::fetch_sub_module`,
    `update_recompute_parameters`), and releases it when that module's backward ends
    (`release_sub_module`), whatever the trace says of its next use. Trainable parameters
    are left out of this, so full fine-tuning keeps a layer's weights from its
    recomputation to their own backward; under LoRA the whole base is frozen.
    Non-reentrant checkpointing recomputes a layer when autograd first unpacks one of its
    saved tensors: inside the backward of its last projection (a Llama's `down_proj`),
    after that module's backward fetch. So the layer's other base weights were released
    when that projection's backward ended, and each was gathered again, alone, for its own
    backward (no trace is invalidated: the order is the same at each step).
    `benchmarks/lora_gathers.py --checkpointing non-reentrant --settings full,lora,lora-leaf`
    (2 CPU ranks, a Llama of hidden 64 and 2 layers): 13 gathers per step in full
    fine-tuning, 23 in LoRA and 21 with the leaves the finetune step makes
    (`lora.zero3_leaf_adapters`): the q, o, gate and up projections of both layers gathered
    a second time (k and v are kept whole at that size).

    Reentrant checkpointing recomputes the layer in the backward of the checkpoint's own
    autograd node, before any of the layer's modules starts its backward: the newest one is
    the layer itself, so the weights stay gathered until its whole backward is done. With
    it (`--checkpointing finetune`) LoRA gathers 13 per step, as full fine-tuning does, and
    trains the same (its losses and adapters after 6 steps bit-identical to those without
    checkpointing and with non-reentrant checkpointing; a T5's differ in rounding, as
    non-reentrant's do). With `--max-reuse-distance 20000`, where full fine-tuning too
    releases weights between a layer's forward and its backward: without checkpointing 16
    (full) and 15 (LoRA, leaves); non-reentrant 17 and 24; this 17 and 16. Full fine-tuning
    gathers the same either way (13, and 17), so it keeps transformers' default, as LoRA
    without ZeRO-3 does.

    Reentrant checkpointing gives gradients through the tensors a layer takes positionally
    (transformers' layers pass so what needs one: the hidden states, T5's encoder states)
    and needs one of them to require a gradient: the Trainer's
    `activation_checkpointing_enable` makes the input embeddings' output require one
    (`enable_input_require_grads`, for models whose main input is `input_ids`, as all here).
    """
    if not train.gradient_checkpointing or train.lora is None or zero3_section(deepspeed) is None:
        return None
    return {"use_reentrant": True}
