"""The evaluate step: the model's outputs on the evaluation split, scored beside baselines.

`evaluate_in_processes` is the step's entry: it evaluates in its own process, or, with
several GPUs, in one torchrun process per GPU (`python -m
llm_pipeline.evaluation.evaluate_model`, see `main`), run and reported as training runs and
reports it, and reads back what rank 0 wrote. Generation is nearly all of an evaluation's
time, and it parallelises perfectly: T5-XXL on CNN/DailyMail's 11,490 test articles on one
GPU of a 16-GPU node would leave fifteen idle. Such a rank dies with the launcher that
started it (`launch.lifetime`), armed before the imports below, and, its outputs written,
ends without the interpreter's teardown (`lifetime.exit_without_teardown`).

`evaluate_model` reads as the step's table of contents, one path for every task: read the
evaluation rows, load the model, run it (summaries, completions of prompts, a classifier's
label probabilities), run the model before fine-tuning alike, then score them all and write
the outputs (`evaluation.scoring`). What differs by task is its scorer (`Task.scorer()`,
in the task's package), which each of those steps calls. Under torchrun, generation is
sharded across the ranks and rank 0 scores and writes.
"""

from __future__ import annotations

from llm_pipeline.launch.lifetime import die_with_parent, exit_without_teardown

if __name__ == "__main__":
    die_with_parent()

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.config.model import ModelConfig
from llm_pipeline.data.overlap import data_note
from llm_pipeline.engines import EngineChoice, load_generator
from llm_pipeline.errors import EvaluationError, UserError
from llm_pipeline.evaluation.examples import evaluation_split
from llm_pipeline.evaluation.scoring import (
    BASE_MODEL,
    Scorer,
    TextScorer,
    distinct_share,
    score_and_write,
    with_task_defaults,
)
from llm_pipeline.evaluation.sharded import init_distributed
from llm_pipeline.launch.cluster import detect_cluster
from llm_pipeline.launch.commands import torchrun_command
from llm_pipeline.launch.failures import first_failure, is_out_of_memory, tail_lines
from llm_pipeline.launch.supervisor import run_launcher
from llm_pipeline.models.generation import default_device, inference_dtype
from llm_pipeline.output_files import (
    EVALUATION_REPORT_FILE,
    METRICS_FILE,
    PREDICTIONS_FILE,
    RESOLVED_CONFIG_FILE,
    Step,
)
from llm_pipeline.progress import status
from llm_pipeline.storage import check_output_complete, to_uri
from llm_pipeline.tasks import DEFAULT_TASK, TASKS, Task, get_task

__all__ = [
    "BASE_MODEL",
    "EVALUATION_REPORT_FILE",
    "METRICS_FILE",
    "PREDICTIONS_FILE",
    "EvaluationResult",
    "distinct_share",
    "evaluate_in_processes",
    "evaluate_model",
    "evaluation_processes",
]

logger = logging.getLogger(__name__)

#: What torchrun runs in each rank: this module's `main`.
EVALUATE_MODULE = "llm_pipeline.evaluation.evaluate_model"
#: How `main` reports a user's mistake, and how `evaluate_in_processes` finds it in a rank's
#: output.
_ERROR_MARK = "ERROR: evaluate failed:"


@dataclass(frozen=True)
class EvaluationResult:
    """What one evaluation produced: the split, the flat metrics, and where it wrote.

    `metrics` holds the task's metrics (`Task.metric_names`; ROUGE F1 ×100, `exact_match`
    a percentage, `perplexity`, a classifier's `accuracy` and F1s as fractions 0..1), each
    with `_low`/`_high` where it has an interval (the 95% bootstrap; absent when
    bootstrap_samples is 0), `samples`, `seconds` (load, run, score), the time the model
    ran (`generation_seconds`, a classifier's `scoring_seconds`), what the task adds
    (`gen_len`: mean generated tokens; `distinct_predictions`), and the baselines' scores
    prefixed `lead{k}_` (summarization), `majority_` (classification) and `base_` (the
    model before fine-tuning). `processes`: how many processes evaluated.
    """

    split: str
    metrics: dict[str, float]
    output_dir: Path
    processes: int = 1

    @property
    def predictions_path(self) -> Path:
        return self.output_dir / PREDICTIONS_FILE

    @property
    def report_path(self) -> Path:
        return self.output_dir / EVALUATION_REPORT_FILE


def evaluation_processes(config: EvaluateConfig, *, gpus: int | None = None) -> int:
    """`evaluate.processes`, else one per GPU (`gpus`, default: those this machine sees), else
    1 on a CPU-only machine.

    Raises EvaluationError for more processes than GPUs: each rank takes the GPU its local
    rank names, so an extra one would find none.
    """
    gpus = torch.cuda.device_count() if gpus is None else gpus
    if config.processes is None:
        return max(gpus, 1)
    if gpus and config.processes > gpus:
        raise EvaluationError(
            f"evaluate.processes: {config.processes}, but this machine has {gpus} GPU(s); "
            f"one process per GPU at most: set it to {gpus} or less, or null for all of them"
        )
    return config.processes


def evaluate_in_processes(
    *,
    model_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
    config: EvaluateConfig,
    output_dir: str | os.PathLike[str],
    env: Mapping[str, str] = os.environ,
    task: str = DEFAULT_TASK,
    start_of: str | os.PathLike[str] | None = None,
    engine: EngineChoice | None = None,
) -> EvaluationResult:
    """Evaluate with `evaluation_processes(config)` processes; the same outputs either way.

    `task` (a `tasks.TASKS` name) says what the model does and how it is scored; `start_of`
    as `evaluate_model` takes it. Several processes run under torchrun with `env` (default:
    this process's environment).
    Raises EvaluationError with the reason: rank 0's message for a user's mistake, else the
    rank that failed and its last output.
    """
    check_output_complete(model_dir, made_by=Step.FINETUNE, error=EvaluationError)
    processes = evaluation_processes(config)
    if processes == 1:
        result = evaluate_model(
            model_dir=model_dir,
            dataset_dir=dataset_dir,
            config=config,
            output_dir=output_dir,
            task=task,
            start_of=start_of,
            engine=engine,
        )
        return replace(result, processes=processes)
    from llm_pipeline.data.saved import load_saved_dataset

    splits = list(load_saved_dataset(dataset_dir, made_by=Step.PREPROCESS, error=EvaluationError))
    # One machine, whatever the environment says about a training cluster: evaluation runs
    # on a single node (`--standalone`, a free port).
    command = torchrun_command(
        detect_cluster({}, procs_per_node=processes),
        module=EVALUATE_MODULE,
        script_args=[
            "--model",
            str(model_dir),
            "--dataset",
            str(dataset_dir),
            "--output",
            str(output_dir),
            "--config",
            config.model_dump_json(),
            "--task",
            task,
            *(["--start-of", str(start_of)] if start_of is not None else []),
            *(["--engine", engine.to_json()] if engine is not None else []),
        ],
    )
    status(f"generating in {processes} processes (torchrun)")
    with tempfile.TemporaryDirectory(prefix="llm-evaluate-") as work:
        log_dir = Path(work) / "logs"
        ended = run_launcher(command, env=env, log_dir=log_dir)
        if ended.code != 0:
            reason = _failure_reason(ended.output_tail, log_dir)
            raise EvaluationError(
                f"evaluation in {processes} processes failed (launcher exit code {ended.code}): "
                + reason
            )
    check_output_complete(output_dir, made_by=Step.EVALUATE, error=EvaluationError)
    folder = Path(to_uri(str(output_dir)))
    metrics = json.loads((folder / METRICS_FILE).read_text())
    return EvaluationResult(evaluation_split(splits, None), metrics, folder, processes)


def evaluate_model(
    *,
    model_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
    config: EvaluateConfig,
    output_dir: str | os.PathLike[str],
    split: str | None = None,
    task: str = DEFAULT_TASK,
    start_of: str | os.PathLike[str] | None = None,
    engine: EngineChoice | None = None,
) -> EvaluationResult:
    """Run the model on the evaluation split and score its outputs; write them.

    `task` (a `tasks.TASKS` name) says what the model does and how it is scored; settings
    `config` leaves unset take the task's defaults. The baseline is the model that the one
    in `start_of` (default: `model_dir`) started from: the gate scores the served version
    against the start of the run's new model, as a task whose metrics are relative to the
    start needs (`Task.needs_base_model`), and on that run's rows, about which that run's
    evaluation has warned already: the console does not repeat it. `split` defaults to
    `test` when the dataset has one, else `validation`. `output_dir` receives
    predictions.jsonl, metrics.json and report.html (and the task's other files), all or
    nothing. `engine` (default transformers) writes the fine-tuned model's texts, as the
    endpoint will (`deploy.engine`); a quantized one's texts are scored beside
    transformers' on the same rows. Under torchrun every rank must call this; every rank
    gets the result. Raises EvaluationError for a model folder or dataset that cannot be
    evaluated.
    """
    started = time.perf_counter()
    rank, _ = init_distributed()
    chosen = _task(task)
    config = with_task_defaults(config, chosen)
    scorer: Scorer = chosen.scorer()
    folder = Path(to_uri(str(output_dir)))
    examples = scorer.load_examples(dataset_dir, split, config.max_samples)
    model, tokenizer = scorer.load_model(model_dir)
    examples = scorer.check_model(model, examples, model_dir, dataset_dir)
    choice = engine or EngineChoice()
    if choice.engine != "transformers" and chosen.model_kind.generates:
        scorer.engine = _load_engine(model_dir, choice, chosen, tokenizer)
    run_started = time.perf_counter()
    outputs = scorer.run(model, tokenizer, examples, config)
    run_seconds = time.perf_counter() - run_started
    if scorer.engine is not None:
        scorer.engine = None
        if isinstance(scorer, TextScorer) and _quantized(choice):
            _score_beside_transformers(scorer, model, tokenizer, examples, config)
    del model  # no longer needed: free its memory (GPU memory too) before scoring
    base = None
    if config.score_base_model or chosen.needs_base_model:
        status("running the model as it was before fine-tuning (baseline)")
        base_model = load_base_model(
            start_of or model_dir, tokenizer, scorer=scorer, examples=examples
        )
        base = scorer.run(base_model, tokenizer, examples, config)
        del base_model
    if rank != 0:
        return _result_from_rank0()

    def score() -> EvaluationResult:
        assert outputs is not None  # rank 0 always holds the gathered outputs
        metrics = score_and_write(
            scorer=scorer,
            examples=examples,
            outputs=outputs,
            config=config,
            output_dir=folder,
            started=started,
            run_seconds=run_seconds,
            base=base,
            data_note=data_note(dataset_dir, examples.split, len(examples.input_ids)),
            rows_said=start_of is not None,
            engine=choice.describe() if chosen.model_kind.generates else None,
        )
        return EvaluationResult(examples.split, metrics, folder)

    return _scored_on_rank0(score, chosen)


def _load_engine(model_dir: Any, choice: EngineChoice, task: Task, tokenizer: Any) -> Any:
    """The fine-tuned model's generator in `choice`'s engine (converted and checked first)."""
    status(f"generating with {choice.describe()} ({choice.reason}), as the endpoint will")
    return load_generator(
        model_dir,
        choice,
        seq2seq=task.model_kind.encoder_decoder,
        device=str(default_device()),
        tokenizer=tokenizer,
        error=EvaluationError,
    )


def _quantized(choice: EngineChoice) -> bool:
    return bool(choice.compute_type and choice.compute_type.startswith("int8"))


def _score_beside_transformers(
    scorer: TextScorer, model: Any, tokenizer: Any, examples: Any, config: EvaluateConfig
) -> None:
    """Run transformers on the same rows, to be scored beside the quantized engine's texts:
    what quantization changed, in the task's own scores."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    status(f"running transformers in {dtype} on the same rows, beside the quantized engine")
    reference = scorer.run(model, tokenizer, examples, config)
    if reference is not None:
        scorer.reference = (f"transformers {dtype}", "transformers_", reference.generated.texts)


def _scored_on_rank0(score: Callable[[], EvaluationResult], task: Task) -> EvaluationResult:
    """Rank 0 scores and writes (`score`), logs the task's metrics and hands the result
    (or its error) to the other ranks."""
    try:
        result = score()
    except BaseException as exc:
        _share_with_other_ranks(f"{type(exc).__name__}: {exc}")
        raise
    metrics = result.metrics
    scores = ", ".join(f"{k} {metrics[k]:.3g}" for k in task.metric_names if k in metrics)
    logger.info("%s: %s", result.split, scores)
    _share_with_other_ranks(result)
    return result


def _task(name: str) -> Task:
    try:
        return get_task(name)
    except KeyError as exc:
        raise EvaluationError(str(exc.args[0])) from None


def load_base_model(
    model_dir: str | os.PathLike[str], tokenizer: Any, *, scorer: Scorer, examples: Any
) -> Any:
    """The model the fine-tuned one started from, rebuilt by the task's scorer from the
    `model` settings recorded in its folder with the training seed (so a random
    initialisation is the same one: a classifier's new head, for one)."""
    from transformers import set_seed

    recorded = Path(model_dir) / RESOLVED_CONFIG_FILE
    try:
        payload = json.loads(recorded.read_text(encoding="utf-8"))
        model_config = ModelConfig.model_validate(payload["model"])
        seed = int(payload.get("train", {}).get("seed", 42))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EvaluationError(
            f"evaluate.score_base_model: {recorded} does not say which model training started "
            f"from ({exc}); it is written by the finetune step"
        ) from exc
    set_seed(seed)
    try:
        model = scorer.base_model(model_config, tokenizer, examples)
    except UserError as exc:
        raise EvaluationError(f"evaluate.score_base_model: {exc}") from exc
    device = default_device()
    # The same device and precision as the fine-tuned model is loaded with.
    # transformers wraps `to` in a decorator that mypy misreads; the call itself is plain.
    cast(Any, model).to(device, dtype=inference_dtype(device))
    model.eval()
    return model


def _share_with_other_ranks(outcome: EvaluationResult | str) -> None:
    """Hand rank 0's result (or its error, as text) to the other ranks waiting for it."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list([outcome], src=0)


def _result_from_rank0() -> EvaluationResult:
    box: list[EvaluationResult | str | None] = [None]
    dist.broadcast_object_list(box, src=0)
    outcome = box[0]
    if not isinstance(outcome, EvaluationResult):
        # Rank 0 already reports the error itself; this rank only says why it stops.
        raise RuntimeError(f"evaluation failed on rank 0: {outcome}")
    return outcome


def _failure_reason(output: str, log_dir: Path) -> str:
    """What a rank said of a user's mistake (as one process would say it), else the rank that
    failed first and why, as training names it."""
    for line in output.splitlines():
        if _ERROR_MARK in line:
            return line.split(_ERROR_MARK, 1)[1].strip()
    failure = first_failure(log_dir=log_dir, launcher_output=output)
    if failure is None:
        return "no rank reported an error; the launcher's last lines:\n" + tail_lines(output)
    if is_out_of_memory(failure.detail):
        return (
            f"rank {failure.local_rank} ran out of GPU memory: {failure.detail}\nTo fit: "
            "lower evaluate.batch_size (documents per process), evaluate.num_beams or "
            "evaluate.max_new_tokens."
        )
    return f"rank {failure.local_rank} {failure.how}:\n{failure.detail}"


def main(argv: list[str] | None = None) -> None:
    """`[torchrun ...] python -m llm_pipeline.evaluation.evaluate_model --model M --dataset D ...`

    A user's mistake is printed as one `_ERROR_MARK` line and exit code 1 (the
    step repeats it); run as a module, any other exception is recorded for torchrun
    (`record`), which the step's failure message quotes.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the finetune step's model folder")
    parser.add_argument("--dataset", required=True, help="the preprocess step's dataset folder")
    parser.add_argument("--output", required=True, help="folder for predictions and report")
    parser.add_argument("--config", default="{}", help="EvaluateConfig as JSON")
    parser.add_argument("--split", default=None, help="default: test if present, else validation")
    parser.add_argument(
        "--task", default=DEFAULT_TASK, choices=sorted(TASKS), help="what the model does"
    )
    parser.add_argument(
        "--start-of", default=None, help="model folder whose start is the baseline (--model's)"
    )
    parser.add_argument("--engine", default=None, help="EngineChoice as JSON (transformers)")
    args = parser.parse_args(argv)
    is_rank0 = int(os.environ.get("RANK", "0")) == 0
    # One progress log, rank 0's: the other ranks say only what goes wrong.
    logging.basicConfig(
        level=logging.INFO if is_rank0 else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not is_rank0:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # weight loading's bar, once per rank
    try:
        result = evaluate_model(
            model_dir=args.model,
            dataset_dir=args.dataset,
            config=EvaluateConfig.from_component(args.config),
            output_dir=args.output,
            split=args.split,
            task=args.task,
            start_of=args.start_of,
            engine=EngineChoice.from_json(args.engine) if args.engine else None,
        )
    except UserError as exc:
        print(f"{_ERROR_MARK} {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if is_rank0:
        print(json.dumps(result.metrics, indent=2))


if __name__ == "__main__":
    # Here, not as a decorator: in-process callers (tests) keep their own fault handler.
    record(main)()
    # Written and out of the process group (`main`): end without the interpreter's teardown.
    # An exception does not get here: `record` has written it and it propagates.
    exit_without_teardown(0)
