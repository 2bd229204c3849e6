"""The Hugging Face pieces of the finetune step: DeepSpeed config, arguments, the Trainer.

`Seq2SeqTrainer` owns the loop of an encoder-decoder, the plain `Trainer` that of a causal LM
and of a classifier (the model kind comes from the task, and so do the collator and the loss:
`Task.training_collator`, `Task.training_loss`). What this adds: the precision a run trains
in (the config's choice checked against this machine), DeepSpeed settings from `TrainConfig`
(or the user's JSON), checkpoint rotation left to `checkpoint_sync` (it knows which
checkpoints are complete, the Trainer does not), a reproducible length-grouped order, the
token-mean loss of generating models, a task's own `ModelLoss` (it runs the model on the
batch and starts before the first step: DPO's), and counts of the samples and tokens each
rank trained on, for throughput figures that hold for resumed runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import torch
from datasets import Dataset
from transformers import (
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

from llm_pipeline.config import TrainConfig
from llm_pipeline.config.train import AUTO
from llm_pipeline.errors import TrainError
from llm_pipeline.models.generation import native_bf16
from llm_pipeline.tasks import Task
from llm_pipeline.tasks.base import ModelLoss
from llm_pipeline.tasks.kinds import SEQ2SEQ, ModelKind
from llm_pipeline.train import device_defaults
from llm_pipeline.train.collators import LABEL_PAD, WithoutCache
from llm_pipeline.train.deepspeed_config import (
    build_deepspeed_config,
    load_user_deepspeed_config,
    resolve_precision,
    zero3_section,
)
from llm_pipeline.train.spec import WorkerSpec
from llm_pipeline.train.step_health import (
    StepHealth,
    lost_steps_error,
    skipped_so_far,
)

Sampling = Literal["group_by_length", "random", "sequential"]
_BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")


class EpochSeededLengthGroupedSampler(LengthGroupedSampler):
    """Length-grouped order that depends only on `seed` and the epoch number.

    Hugging Face's LengthGroupedSampler draws from the global RNG when an epoch starts. A resumed
    run restores the RNG as it was at the checkpoint, mid-epoch, so it would draw another order
    and then skip the wrong batches: some examples twice, others never. Seeding each epoch from
    (seed, epoch) makes the order a function of the epoch alone, so skipping the batches already
    trained lands exactly where the killed run stopped.
    """

    def __init__(self, *, lengths: Sequence[int], batch_size: int, seed: int) -> None:
        super().__init__(batch_size, lengths=list(lengths))
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by the Trainer at the start of every epoch, resumed ones included."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))


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


def token_mean_loss(label_smoothing: float, *, shift: bool = False) -> Callable[..., torch.Tensor]:
    """Cross-entropy summed over label tokens, divided by the label tokens of the whole step.

    The Trainer counts the step's label tokens over every micro-batch and rank
    (`num_items_in_batch`) and multiplies each rank's loss by the process count, assuming the
    model divided by that count. T5 and EncoderDecoderModel return a per-batch mean instead, so
    without this the loss and gradients come out N times too large on N processes and ranks
    are weighted equally rather than by their tokens. With it, N processes compute exactly
    the gradient one process would on the same global batch.

    `shift` (causal LMs): the logits at position t predict the token at t + 1, so they are
    scored against the labels one place on; the first label is never a target (the causal
    collator sets it to -100, so the Trainer's count agrees).
    """

    def loss(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[1]
        if shift:
            logits, labels = logits[:, :-1], labels[:, 1:]
        total = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).float(),
            labels.flatten().to(logits.device),
            ignore_index=LABEL_PAD,
            reduction="sum",
            label_smoothing=label_smoothing,
        )
        count = (
            num_items_in_batch if num_items_in_batch is not None else (labels != LABEL_PAD).sum()
        )
        return total / count

    return loss


class FinetuneTrainer(Trainer):
    """A Trainer that counts what it trains on and orders examples reproducibly (a causal
    LM's and a classifier's; `Seq2SeqFinetuneTrainer` is an encoder-decoder's)."""

    def __init__(
        self,
        *args: Any,
        sampling: Sampling = "group_by_length",
        labels_are_tokens: bool = True,
        model_loss: ModelLoss | None = None,
        row_lengths: Callable[[Any], list[int]] | None = None,
        keep_folder: str | None = None,
        compile_blocks: bool = False,
        **kwargs: Any,
    ) -> None:
        #: `train.compile: blocks`: read by `_build_accelerator_args`, which the Trainer's
        #: own __init__ calls, so set before it.
        self.compile_blocks = compile_blocks
        super().__init__(*args, **kwargs)
        if compile_blocks and not getattr(
            self.accelerator.state.dynamo_plugin, "use_regional_compilation", False
        ):
            raise TrainError(
                "train.compile: blocks needs regional compilation, and the installed "
                "transformers did not pass it to accelerate: compile the whole model "
                "(train.compile: true) with this version"
            )
        self.sampling = sampling
        #: A task's loss that runs the model itself (`Task.training_loss`), or None.
        self.model_loss = model_loss
        if model_loss is not None:
            # Its loss is a per-batch mean: the Trainer divides it by the accumulation steps.
            self.loss_is_scaled_for_ga = False
        self.row_lengths = row_lengths or (lambda split: [len(ids) for ids in split["input_ids"]])
        #: Where a model loss keeps what a resumed run must reuse (the run's checkpoints).
        self.keep_folder = keep_folder
        # The model loss's figures, summed on the device over the logging period.
        self._figures: dict[str, torch.Tensor] = {}
        self._figure_batches = 0
        #: Whether the labels are tokens, counted as target tokens (`ModelKind.generates`);
        #: a classifier's are label ids.
        self.labels_are_tokens = labels_are_tokens
        # Tensors on the device: reading a count back every micro-batch would stall the GPU.
        self._samples = torch.zeros((), dtype=torch.long)
        self._source_tokens = torch.zeros((), dtype=torch.long)
        self._target_tokens = torch.zeros((), dtype=torch.long)
        # Lost optimizer steps (step_health): DeepSpeed skips them, fp16's GradScaler too.
        scaler = getattr(self.accelerator, "scaler", None) is not None
        self.step_health = StepHealth(
            skips_nonfinite=self.is_deepspeed_enabled, scaler_skips=scaler
        )
        self._skipped_before = 0

    def _build_accelerator_args(self, **kwargs: Any) -> dict[str, Any]:
        """The Trainer's Accelerator arguments; under `train.compile: blocks` its torch.compile
        plugin compiles each repeated block instead of the whole model (accelerate's
        `compile_regions`, or `compile_regions_deepspeed` under DeepSpeed)."""
        args: dict[str, Any] = super()._build_accelerator_args(**kwargs)
        plugin = args.get("dynamo_plugin")
        if self.compile_blocks and plugin is not None:
            plugin.use_regional_compilation = True
        return args

    def training_step(
        self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        ids, labels = inputs["input_ids"], inputs["labels"]
        # Packed rows come without a mask (their position_ids keep examples apart): every
        # token of them is read.
        mask = inputs.get("attention_mask")
        device = ids.device
        self._samples = self._samples.to(device) + ids.shape[0]
        read = mask.sum() if mask is not None else ids.numel()
        self._source_tokens = self._source_tokens.to(device) + read
        if self.labels_are_tokens:
            self._target_tokens = self._target_tokens.to(device) + (labels != LABEL_PAD).sum()
        # Under DeepSpeed the optimizer steps inside this call (accelerate's backward runs
        # engine.step() at the end of an accumulation), so the engine's count moves here.
        self._skipped_before = skipped_so_far(self.model_wrapped) or 0
        return super().training_step(model, inputs, num_items_in_batch)

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """A task's `ModelLoss` runs the model itself; its figures are summed while training."""
        if self.model_loss is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss, figures = self.model_loss(
            model, inputs, unwrapped=self.accelerator.unwrap_model(model)
        )
        if model.training:
            for name, value in figures.items():
                self._figures[name] = self._figures.get(name, 0) + value.detach().float()
            self._figure_batches += 1
        return (loss, {}) if return_outputs else loss

    def prediction_step(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
        **gen_kwargs: Any,
    ) -> tuple[Any, torch.Tensor | None, torch.Tensor | None]:
        """Under a model loss, evaluation is its loss alone: there are no logits to gather."""
        if self.model_loss is None:
            return super().prediction_step(
                model, inputs, prediction_loss_only, ignore_keys, **gen_kwargs
            )
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def _prepare_for_training(
        self, max_steps: int, train_dataloader: Any, resume_from_checkpoint: Any
    ) -> tuple[Any, Any]:
        """transformers' step that wraps the model (DeepSpeed's engine) and loads a resumed
        checkpoint into it; then a model loss starts (`ModelLoss.start`: DPO's reference
        pass), and the loader reads the splits it returns."""
        model, loader = super()._prepare_for_training(
            max_steps, train_dataloader, resume_from_checkpoint
        )
        if self.model_loss is None:
            return model, loader
        splits = {"train": self.train_dataset}
        if self.eval_dataset is not None:
            splits["validation"] = self.eval_dataset
        started = self.model_loss.start(
            model,
            splits,
            collate=self.data_collator,
            batch_size=self.args.per_device_eval_batch_size,
            device=self.args.device,
            keep_folder=self.keep_folder,
            resumed=resume_from_checkpoint is not None,
        )
        self.eval_dataset = started.get("validation")
        if started["train"] is not self.train_dataset:
            self.train_dataset = started["train"]
            loader = self.get_train_dataloader()
            self.callback_handler.train_dataloader = loader
        return model, loader

    def _get_grad_norm(self, model: Any, grad_norm: Any = None) -> Any:
        """The Trainer's gradient norm of each optimizer step, recorded by `step_health`.

        transformers' loop (trainer.py, `_inner_training_loop`) calls this once per
        optimizer step, after the backward (and under DeepSpeed after its step), with the
        norm it clipped by; reusing that norm costs no extra pass over the gradients.
        """
        norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        engine_skips = skipped_so_far(self.model_wrapped)
        skipped = engine_skips is not None and engine_skips > self._skipped_before
        self.step_health.record(norm, skipped=skipped)
        return norm

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """A training period's log entry also says how many steps were lost (read here,
        once per period); most of the recent ones lost stops the run (`lost_steps_error`).
        Every rank decides alike: DeepSpeed's skips and the gradient norm are global."""
        counts = self.step_health.read() if "loss" in logs else None
        if counts:
            logs = {**logs, **counts.as_logs(), **self._period_figures()}
        super().log(logs, start_time)
        error = lost_steps_error(counts, step=self.state.global_step) if counts else None
        if error is not None:
            raise error

    def _period_figures(self) -> dict[str, float]:
        """The model loss's figures over the period: their means over its batches and every
        rank (a collective: every rank logs the same periods)."""
        if not self._figures:
            return {}
        names = sorted(self._figures)
        sums = torch.stack([self._figures[name] for name in names])
        count = torch.tensor(float(self._figure_batches), device=sums.device)
        totals = self.accelerator.reduce(torch.cat([sums, count[None]]), reduction="sum")
        self._figures, self._figure_batches = {}, 0
        means = (totals[:-1] / totals[-1]).tolist()
        return dict(zip(names, means, strict=True))

    def trained_counts(self) -> tuple[int, int, int]:
        """(samples, source tokens, target tokens) this process trained on in this run.

        Source tokens are the input tokens read (a causal LM's prompt and response alike),
        target tokens those with a label (a causal LM's response tokens; none for a
        classifier, whose labels are not tokens).
        """
        return (
            int(self._samples.item()),
            int(self._source_tokens.item()),
            int(self._target_tokens.item()),
        )

    def _get_train_sampler(self, train_dataset: Any = None) -> torch.utils.data.Sampler | None:
        dataset: Any = train_dataset if train_dataset is not None else self.train_dataset
        if self.sampling == "sequential":
            return torch.utils.data.SequentialSampler(dataset)
        if self.sampling == "random":
            return super()._get_train_sampler(train_dataset)
        args = self.args
        return EpochSeededLengthGroupedSampler(
            lengths=self.row_lengths(dataset),
            batch_size=args.per_device_train_batch_size
            * args.gradient_accumulation_steps
            * args.world_size,
            seed=args.seed,
        )


class Seq2SeqFinetuneTrainer(FinetuneTrainer, Seq2SeqTrainer):
    """`FinetuneTrainer` over `Seq2SeqTrainer`: a seq2seq model's loop."""


def build_trainer(
    *,
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    args: TrainingArguments,
    train_dataset: Dataset,
    eval_dataset: Dataset | None,
    callbacks: list[TrainerCallback],
    sampling: Sampling,
    task: Task,
    train: TrainConfig | None = None,
    label_set: Any = None,
    keep_folder: str | None = None,
) -> FinetuneTrainer:
    """The Trainer for `task`'s model kind, with the task's collator (batches padded per
    batch; to multiples of 8 on a GPU) and loss (`Task.training_collator`,
    `Task.training_loss`; `train`'s settings, default `TrainConfig()`, shape the loss).

    `model` is a `PreTrainedModel`, or one wrapped with LoRA adapters (a `PeftModel`). A task
    whose head scores labels needs their `label_set` (`Task.training_labels`).
    `keep_folder`: where a task's `ModelLoss` keeps what a resumed run reuses (the run's
    checkpoint folder).
    """
    # Multiples of 8 feed tensor cores whole tiles; on the CPU they only add padding.
    multiple = 8 if torch.cuda.is_available() else None
    kind = task.model_kind
    trainer = Seq2SeqFinetuneTrainer if kind.encoder_decoder else FinetuneTrainer
    train = train or TrainConfig()
    loss: Callable[..., Any] | None = task.training_loss(
        train, label_set=label_set, train_set=train_dataset
    )
    model_loss = loss if isinstance(loss, ModelLoss) else None
    if train.kernels == "liger" and model_loss is None:
        # Liger's fused linear cross-entropy is the model's own loss, and runs only when the
        # model gets the labels (a `compute_loss_func` takes them away, and logits are made
        # whole). It is the same token mean: labels shifted, -100 ignored, summed and
        # divided by the step's label tokens (`num_items_in_batch`), as `token_mean_loss`.
        loss = None
    collator = task.training_collator(tokenizer, model, pad_to_multiple_of=multiple)
    if kind.encoder_decoder:
        collator = WithoutCache(collator)
    return trainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=callbacks,
        compute_loss_func=None if model_loss is not None else loss,
        sampling=sampling,
        labels_are_tokens=kind.generates,
        model_loss=model_loss,
        row_lengths=task.training_lengths,
        keep_folder=keep_folder,
        compile_blocks=train.compile == "blocks",
    )
