"""One training process: `python -m llm_pipeline.train.worker --spec spec.json` under torchrun.

`run` is the table of contents of a training process; each line is one stage from `stages`,
`checkpoint_sync` or `outputs`. Failures propagate: torchrun's `record` writes the exception
to the error file the launcher reads, so the step shows this rank's message.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record
from transformers import PreTrainedModel, set_seed

from llm_pipeline.models.loading import freeze_encoder, load_model
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.train import checkpoints, safe_load, stages
from llm_pipeline.train.checkpoint_sync import (
    CheckpointLayout,
    CompleteCheckpoints,
    prepare_resume,
)
from llm_pipeline.train.metrics import final_metrics, last_logged
from llm_pipeline.train.outputs import save_final_model, tensorboard_callbacks, write_result
from llm_pipeline.train.spec import WorkerSpec
from llm_pipeline.train.status import TrainingStatus
from llm_pipeline.train.trainer import FinetuneTrainer, Sampling, build_trainer


def run(spec: WorkerSpec, *, sampling: Sampling | None = None) -> None:
    """Train as `spec` says, resuming from the newest complete checkpoint if there is one.

    `sampling` overrides the example order (tests compare runs on a fixed order).
    """
    # Under DeepSpeed's launcher, nodes other than the primary never had this folder made.
    Path(spec.work_dir).mkdir(parents=True, exist_ok=True)
    safe_load.install()
    stages.init_process_group(spec)
    layout = stages.plan_checkpoints(spec)
    resume_from = prepare_resume(layout)
    precision = stages.precision(spec)
    tokenizer = load_tokenizer(spec.model)
    train_set, eval_set = stages.load_splits(spec)
    args = stages.arguments(spec, layout, precision=precision, has_eval=eval_set is not None)
    set_seed(spec.train.seed)
    model = load_model(spec.model, tokenizer)
    if spec.train.freeze_encoder:
        freeze_encoder(model)
    clock = stages.Clock()
    trainer = build_trainer(
        model=model,
        tokenizer=tokenizer,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        callbacks=[
            CompleteCheckpoints(layout),
            clock,
            TrainingStatus(),
            *tensorboard_callbacks(spec),
        ],
        sampling=sampling or ("group_by_length" if spec.train.group_by_length else "random"),
        label_smoothing=spec.train.label_smoothing,
    )
    stages.train(trainer, resume_from)
    eval_loss = stages.evaluate(trainer)
    metrics = _metrics(trainer, model, clock, eval_loss=eval_loss, resume_from=resume_from)
    resolved = {
        "precision": precision,
        "deepspeed": args.deepspeed,
        "world_size": metrics["world_size"],
    }
    save_final_model(trainer, tokenizer, spec, resolved=resolved)
    write_result(spec, _result(trainer, layout, metrics))
    stages.leave_process_group()


def _metrics(
    trainer: FinetuneTrainer,
    model: PreTrainedModel,
    clock: stages.Clock,
    *,
    eval_loss: float | None,
    resume_from: str | None,
) -> dict[str, Any]:
    counts = stages.gather_counts(
        trainer,
        seconds=clock.seconds,
        parameters=stages.count_parameters(model),
        non_embedding_parameters=stages.count_parameters(model, embeddings=False),
    )
    return final_metrics(
        counts=counts,
        train_loss=last_logged(trainer.state.log_history, "loss"),
        eval_loss=eval_loss,
        global_step=trainer.state.global_step,
        resumed_from_step=checkpoints.step_of(resume_from) if resume_from else None,
    )


def _result(
    trainer: FinetuneTrainer, layout: CheckpointLayout, metrics: dict[str, Any]
) -> dict[str, Any]:
    return {
        "metrics": metrics,
        "checkpoint_folder": layout.folder,
        "log": trainer.state.log_history,
    }


@record
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="The WorkerSpec JSON run_finetune wrote.")
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
    run(WorkerSpec.read(options.spec), sampling=options.sampling)


if __name__ == "__main__":
    main()
