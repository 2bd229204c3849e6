"""The Trainer of the finetune step: `Seq2SeqTrainer` owns the loop of an encoder-decoder,
the plain `Trainer` that of a causal LM and of a classifier (the model kind comes from the
task, and so do the collator and the loss: `Task.training_collator`, `Task.training_loss`).
What this adds: checkpoint rotation left to `checkpoint_sync` (it knows which checkpoints
are complete, the Trainer does not), a reproducible length-grouped order, the token-mean
loss of generating models, a task's own `ModelLoss` (it runs the model on the batch and
starts before the first step: DPO's), counts of the samples and tokens each rank trained
on, for throughput figures that hold for resumed runs, and the steps lost to non-finite
gradients. What it is told (precision, DeepSpeed config, arguments) is `trainer_settings`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import torch
from datasets import Dataset
from transformers import (
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

from llm_pipeline.config import TrainConfig
from llm_pipeline.data.saved import is_packed
from llm_pipeline.errors import TrainError
from llm_pipeline.tasks import Task
from llm_pipeline.tasks.base import ModelLoss
from llm_pipeline.train.collators import LABEL_PAD, WithoutCache
from llm_pipeline.train.step_health import (
    StepHealth,
    lost_steps_error,
    skipped_so_far,
)

Sampling = Literal["group_by_length", "random", "sequential"]


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
        compile_dynamic: bool = False,
        **kwargs: Any,
    ) -> None:
        #: `train.compile: blocks`, and whether torch.compile traces batch lengths as
        #: dynamic from the first compile: read by `_build_accelerator_args`, which the
        #: Trainer's own __init__ calls, so set before it.
        self.compile_blocks = compile_blocks
        self.compile_dynamic = compile_dynamic
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
        # The model loss's figures, summed on the device over the logging period (training)
        # and over the evaluation running now.
        self._figures: dict[bool, dict[str, torch.Tensor]] = {True: {}, False: {}}
        self._figure_batches = {True: 0, False: 0}
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
        `compile_regions`, or `compile_regions_deepspeed` under DeepSpeed).

        Batches padded to their longest row (all but packed ones) come in many lengths, and
        torch compiles a graph for the lengths it first sees, again at the next new one,
        and only then for any (its automatic dynamic shapes), each graph on its own. On one
        H200 a T5-large compiled by blocks spent about 113 s in its first five steps so:
        trained with eager attention, as on a GPU (`models/attention.py`), its encoder and
        decoder blocks are separate graphs, and the decoder's compiled again at step 2
        (reproduced on the CPU with `attn_implementation: eager`). Traced dynamic from the
        first compile (`compile_dynamic`), each compiles once. Packed rows have one length,
        where a graph for it is the better one."""
        args: dict[str, Any] = super()._build_accelerator_args(**kwargs)
        plugin = args.get("dynamo_plugin")
        if plugin is not None:
            if self.compile_blocks:
                plugin.use_regional_compilation = True
            if self.compile_dynamic:
                plugin.dynamic = True
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
        """A task's `ModelLoss` runs the model itself; its figures are summed, apart for
        training and evaluation."""
        if self.model_loss is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss, figures = self.model_loss(
            model, inputs, unwrapped=self.accelerator.unwrap_model(model)
        )
        sums = self._figures[model.training]
        for name, value in figures.items():
            sums[name] = sums.get(name, 0) + value.detach().float()
        self._figure_batches[model.training] += 1
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
            logs = {**logs, **counts.as_logs(), **self._period_figures(training=True)}
        super().log(logs, start_time)
        error = lost_steps_error(counts, step=self.state.global_step) if counts else None
        if error is not None:
            raise error

    def evaluation_loop(self, *args: Any, **kwargs: Any) -> Any:
        """transformers' loop, whose metrics also hold the model loss's figures over the
        evaluation (`eval_reward_accuracy`, as the Trainer names `eval_loss`)."""
        self._figures[False], self._figure_batches[False] = {}, 0
        output = super().evaluation_loop(*args, **kwargs)
        prefix = kwargs.get("metric_key_prefix", args[4] if len(args) > 4 else "eval")
        figures = self._period_figures(training=False)
        if output.metrics is not None:
            output.metrics.update({f"{prefix}_{name}": value for name, value in figures.items()})
        return output

    def _period_figures(self, *, training: bool) -> dict[str, float]:
        """The model loss's figures over the period (or the evaluation): their means over
        its batches and every rank (a collective: every rank logs the same periods and runs
        the same evaluations)."""
        figures = self._figures[training]
        if not figures:
            return {}
        names = sorted(figures)
        sums = torch.stack([figures[name] for name in names])
        count = torch.tensor(float(self._figure_batches[training]), device=sums.device)
        totals = self.accelerator.reduce(torch.cat([sums, count[None]]), reduction="sum")
        self._figures[training], self._figure_batches[training] = {}, 0
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
        # Packed rows have one length; others many.
        compile_dynamic=not is_packed(getattr(train_dataset, "column_names", None) or ()),
    )
