"""One training process: `python -m llm_pipeline.train.worker --spec spec.json` under torchrun.

`run` is the table of contents of a training process: each line is one stage, in a module
named for what it does. Failures propagate: torchrun's `record` writes the exception to the
error file the launcher reads, so the step shows this rank's message. SIGTERM (preemption)
ends the process with `PREEMPTED_EXIT_CODE`, after a checkpoint if training had begun
(`preemption`). It dies with the launcher that started it (`lifetime`), armed before the
imports below, which take seconds.
"""

from __future__ import annotations

from llm_pipeline.launch.lifetime import die_with_parent, exit_without_teardown
from llm_pipeline.launch.node_files import load_node_secrets

if __name__ == "__main__":
    die_with_parent()
    load_node_secrets()  # under DeepSpeed's multi-node launcher: HF_TOKEN and the like

import argparse
import contextlib
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from peft import PeftModel
from torch.distributed.elastic.multiprocessing.errors import record
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainingArguments, set_seed
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.trainer_utils import TrainOutput

from llm_pipeline import caches
from llm_pipeline.errors import PREEMPTED_EXIT_CODE, TrainError
from llm_pipeline.fit.shapes import ShapeUnavailable, model_shape
from llm_pipeline.launch.failures import out_of_memory_message
from llm_pipeline.models.attention import training_attention
from llm_pipeline.models.loading import freeze_encoder, hidden_size
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.tasks import Task, get_task
from llm_pipeline.train import (
    checkpoints,
    counts,
    device_defaults,
    op_builds,
    process_group,
    safe_load,
    training_data,
)
from llm_pipeline.train.checkpoint_sync import (
    CheckpointLayout,
    CompleteCheckpoints,
    plan_layout,
    prepare_resume,
    release_folder,
)
from llm_pipeline.train.lora import apply_lora, keep_frozen_in, zero3_leaf_adapters
from llm_pipeline.train.metrics import final_metrics, last_logged
from llm_pipeline.train.outputs import save_final_model, tensorboard_callbacks, write_result
from llm_pipeline.train.preemption import Preempted, SaveOnSignal
from llm_pipeline.train.spec import WorkerSpec
from llm_pipeline.train.startup import StartupWatchdog
from llm_pipeline.train.status import TrainingStatus
from llm_pipeline.train.trainer import FinetuneTrainer, Sampling, build_trainer
from llm_pipeline.train.trainer_settings import (
    deepspeed_settings,
    training_arguments,
    training_precision,
)


def run(spec: WorkerSpec, *, sampling: Sampling | None = None) -> None:
    """Train as `spec` says, resuming from the newest complete checkpoint if there is one.

    `sampling` overrides the example order (tests compare runs on a fixed order).
    """
    stopper, watchdog = _guard_startup(spec)
    process_group.join(spec)
    layout = _plan_checkpoints(spec)
    resume_from = prepare_resume(layout)
    train_precision = training_precision(spec)
    task = get_task(spec.task)
    tokenizer = load_tokenizer(spec.model, kind=task.model_kind)
    train_set, eval_set = training_data.load_splits(spec)
    label_set = task.training_labels(spec)
    args = trainer_arguments(
        spec,
        layout,
        precision=train_precision,
        has_eval=eval_set is not None,
        task=task,
        keep_columns=task.training_columns is not None,
    )
    model = _build_model(
        spec,
        task,
        tokenizer,
        label_set,
        frozen_dtype=_frozen_dtype(spec, train_precision, args),
        cuda=not args.use_cpu,
    )
    if spec.train.compile:  # kernels kept for the next run, in a folder of this user's
        caches.keep_compiled_kernels()
    if spec.train.kernels == "liger":  # the arguments checked the GPU and the package
        device_defaults.check_liger_model(str(model.config.model_type))
    clock = counts.Clock()
    trainer = build_trainer(
        model=model,
        tokenizer=tokenizer,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        callbacks=[
            CompleteCheckpoints(layout),
            stopper,
            watchdog,
            clock,
            TrainingStatus(figures=task.training_figures),
            *tensorboard_callbacks(spec),
        ],
        sampling=sampling or ("group_by_length" if spec.train.group_by_length else "random"),
        task=task,
        train=spec.train,
        label_set=label_set,
        keep_folder=layout.folder,
    )
    try:
        train(trainer, resume_from, stopper)
    except Preempted as stop:
        _report_preemption(spec, layout, stop)
        raise
    eval_loss = final_eval_loss(trainer)
    metrics = _metrics(
        trainer, clock, eval_loss=eval_loss, resume_from=resume_from, figures=task.training_figures
    )
    resolved = {
        "precision": train_precision,
        "deepspeed": args.deepspeed,
        "world_size": dist.get_world_size(),
    }
    if template := training_data.chat_template(spec):
        # Saved with the tokenizer, so whatever serves or loads the folder renders chats
        # (history included) as training did, with no setting to pass along.
        tokenizer.chat_template = template
    save_final_model(trainer, tokenizer, spec, resolved=resolved)
    write_result(spec, _result(trainer, layout, metrics))
    process_group.leave()


def train(trainer: FinetuneTrainer, resume_from: str | None, stopper: SaveOnSignal) -> TrainOutput:
    """Run the loop to its end, or until SIGTERM has been turned into a saved checkpoint
    (then `Preempted`); out-of-memory becomes a message naming the settings to lower."""
    try:
        output = trainer.train(resume_from_checkpoint=resume_from)
    except torch.OutOfMemoryError as err:
        raise TrainError(out_of_memory_message(str(err))) from err
    if stopper.saved_step is not None:
        assert stopper.signum is not None
        raise Preempted(stopper.signum, step=stopper.saved_step)
    return output


def final_eval_loss(trainer: FinetuneTrainer) -> float | None:
    """Loss on the validation split, or None without one."""
    if trainer.eval_dataset is None:
        return None
    last = trainer.state.log_history[-2:] if trainer.state.log_history else []
    for entry in last:
        # The Trainer evaluates by itself when the last step ends an eval period.
        if "eval_loss" in entry and entry.get("step") == trainer.state.global_step:
            return float(entry["eval_loss"])
    return float(trainer.evaluate()["eval_loss"])


def _guard_startup(spec: WorkerSpec) -> tuple[SaveOnSignal, StartupWatchdog]:
    """What protects start-up: SIGTERM handling, a bounded wait, loads a kill cannot wedge."""
    # Under DeepSpeed's launcher, nodes other than the primary never had this folder made.
    Path(spec.work_dir).mkdir(parents=True, exist_ok=True)
    stopper = SaveOnSignal()
    stopper.install()
    watchdog = StartupWatchdog(spec.train.startup_timeout_s, entry="run").start()
    safe_load.install()
    op_builds.install()
    return stopper, watchdog


def _plan_checkpoints(spec: WorkerSpec) -> CheckpointLayout:
    """This run's checkpoint folder (per fingerprint) and who writes, uploads and marks."""
    fingerprint = checkpoints.run_fingerprint(
        model=spec.model,
        train=spec.train,
        dataset_dir=spec.dataset_dir,
        world_size=dist.get_world_size(),
    )
    return plan_layout(
        folder=checkpoints.run_folder(spec.checkpoint_root, fingerprint),
        staging=str(Path(spec.work_dir) / "staging"),
        fingerprint=fingerprint,
        keep=spec.train.save_total_limit,
        node_count=spec.node_count,
    )


def trainer_arguments(
    spec: WorkerSpec,
    layout: CheckpointLayout,
    *,
    precision: str,
    has_eval: bool,
    task: Task,
    keep_columns: bool = False,
) -> TrainingArguments:
    """Trainer arguments with the DeepSpeed config, for the checkpoint layout and the world
    size.

    Create them before loading the model: under ZeRO-3 their existence is what makes
    `from_pretrained` build the model already partitioned across ranks.
    """
    deepspeed = deepspeed_settings(
        spec.train,
        precision=precision,
        world_size=dist.get_world_size(),
        hidden_size=hidden_size(spec.model),
        largest_adapter=largest_adapter(spec, task),
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
        kind=task.model_kind,
        keep_columns=keep_columns,
    )


def largest_adapter(spec: WorkerSpec, task: Task) -> int | None:
    """Elements of the largest adapter matrix `train.lora` will add, None without LoRA.

    Counted from the model's config on the meta device (`fit.shapes`, as the fit check
    counts), because the DeepSpeed config must exist before the weights load; None where the
    config cannot be read (ZeRO-3 then keeps Hugging Face's persistence threshold).
    """
    if spec.train.lora is None:
        return None
    try:
        shape = model_shape(
            spec.model, kind=task.model_kind, terms=task.fit_terms(), lora=spec.train.lora
        )
    except ShapeUnavailable:
        return None
    return shape.adapters.largest_adapter if shape.adapters is not None else None


def _frozen_dtype(spec: WorkerSpec, precision: str, args: TrainingArguments) -> torch.dtype | None:
    """The dtype a LoRA run keeps its frozen base in: the 16-bit training dtype without
    DeepSpeed (`lora.keep_frozen_in`); None where the base stays as loaded (no LoRA, fp32,
    or DeepSpeed, which casts the model itself)."""
    if spec.train.lora is None or args.deepspeed or precision == "fp32":
        return None
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def _build_model(
    spec: WorkerSpec,
    task: Task,
    tokenizer: PreTrainedTokenizerBase,
    label_set: Any,
    *,
    frozen_dtype: torch.dtype | None = None,
    cuda: bool = False,
) -> PreTrainedModel | PeftModel:
    """The task's model, seeded, with LoRA adapters and the encoder frozen if the config says
    so (both: adapters on the decoder alone train); a head scores `label_set`.
    `frozen_dtype`: what the frozen weights of a LoRA run are kept in (`_frozen_dtype`).
    `cuda`: it trains on a GPU, with the attention `models.attention` picks there."""
    set_seed(spec.train.seed)
    labels = task.model_labels(spec, label_set) if label_set is not None else None
    model = task.build_model(spec.model, tokenizer, labels=labels)
    training_attention(model, cuda=cuda, architecture=spec.model.architecture)
    lora = spec.train.lora
    options = task.lora_options(model) if lora is not None else None
    wrapped = apply_lora(model, lora, options=options) if lora is not None else model
    if spec.train.freeze_encoder:
        # `model` holds the adapters too (PEFT inserts them in place): the encoder's freeze.
        freeze_encoder(model)
    if lora is not None and is_deepspeed_zero3_enabled():
        # The Trainer's arguments, made before, hold the ZeRO-3 config: one module per
        # adapted layer for ZeRO-3's hooks, not five (the function says why).
        zero3_leaf_adapters(wrapped)
    if frozen_dtype is not None:
        keep_frozen_in(wrapped, frozen_dtype)
    return wrapped


def _metrics(
    trainer: FinetuneTrainer,
    clock: counts.Clock,
    *,
    eval_loss: float | None,
    resume_from: str | None,
    figures: Iterable[str] = (),
) -> dict[str, Any]:
    lost = trainer.step_health.read()  # alike on every rank: the norm and skips are global
    history = trainer.state.log_history
    return final_metrics(
        counts=counts.gather_counts(trainer, clock),
        train_loss=last_logged(trainer.state.log_history, "loss"),
        eval_loss=eval_loss,
        global_step=trainer.state.global_step,
        resumed_from_step=checkpoints.step_of(resume_from) if resume_from else None,
        skipped_steps=lost.skipped,
        nonfinite_steps=lost.nonfinite,
        figures={
            f"{prefix}_{name}": last_logged(history, logged + name)
            for prefix, logged in (("train", ""), ("eval", "eval_"))
            for name in figures
        },
    )


def _result(
    trainer: FinetuneTrainer, layout: CheckpointLayout, metrics: dict[str, Any]
) -> dict[str, Any]:
    return {
        "metrics": metrics,
        "checkpoint_folder": layout.folder,
        "log": trainer.state.log_history,
    }


def _report_preemption(spec: WorkerSpec, layout: CheckpointLayout, stop: Preempted) -> None:
    """Tell the launcher which checkpoint the stop saved; the ranks are in step, so they
    leave the group cleanly (an exit with it up can abort, hiding the exit code)."""
    write_result(spec, {"preempted_at_step": stop.step, "checkpoint_folder": layout.folder})
    process_group.leave()


@record
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec", help="The WorkerSpec JSON run_finetune wrote.")
    source.add_argument(
        "--node-spec",
        metavar="DIGEST",
        help="Run the spec this node wrote in its private folder (DeepSpeed's multi-node "
        "launcher), if its digest is DIGEST.",
    )
    parser.add_argument(
        "--sampling",
        choices=["group_by_length", "random", "sequential"],
        default=None,
        help="Override the example order (default: from train.group_by_length).",
    )
    # DeepSpeed's launcher passes this; LOCAL_RANK in the environment says the same and is
    # what the stages read.
    parser.add_argument("--local_rank", "--local-rank", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    try:
        spec = (
            WorkerSpec.read(options.spec)
            if options.spec
            else WorkerSpec.read_node_copy(options.node_spec)
        )
        run(spec, sampling=options.sampling)
    except Preempted as stop:
        print(f"stopped by {stop} after saving step {stop.step}", file=sys.stderr, flush=True)
        code = PREEMPTED_EXIT_CODE
    else:
        code = 0
    finally:
        release_folder()
        _leave_the_group()
    exit_without_teardown(code)


def _leave_the_group() -> None:
    """Tear the process group down before the interpreter does: left to exit, gloo's
    threads can outlive their group and abort the rank ('terminate called without an
    active exception', seen once in a rank that had finished training under load)."""
    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
