"""The evaluate step: the model's outputs on the evaluation split, scored beside baselines.

`evaluate_model` reads as the step's table of contents: pick the split, load the model,
generate (summaries, or completions of prompts), score the model and its baselines through
the same path (the task's metrics: ROUGE, exact match, perplexity), write the outputs. A
classifier generates nothing: its label probabilities are scored (accuracy, F1s, confusion
matrix; `evaluation.classifier_scoring`) beside the majority class and the base model.
It also runs under torchrun (`python -m llm_pipeline.evaluation.evaluate_model`, see `main`):
generation is sharded across the processes and rank 0 scores and writes; such a process dies
with the launcher that started it (`launch.lifetime`), armed before the imports below.
"""

from __future__ import annotations

from llm_pipeline.launch.lifetime import die_with_parent

if __name__ == "__main__":
    die_with_parent()

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.config.model import ModelConfig
from llm_pipeline.errors import EvaluationError, UserError
from llm_pipeline.evaluation.classifier_examples import (
    ClassifierExamples,
    load_classifier_examples,
)
from llm_pipeline.evaluation.classifier_scoring import score_classifier_and_write
from llm_pipeline.evaluation.examples import load_examples
from llm_pipeline.evaluation.generate import init_distributed
from llm_pipeline.evaluation.rouge import RougeResult
from llm_pipeline.evaluation.runs import (
    classify,
    load_for_evaluation,
    run_model,
    with_task_defaults,
)
from llm_pipeline.evaluation.scoring import BASE_MODEL, distinct_share, score_and_write
from llm_pipeline.models.generation import default_device, inference_dtype
from llm_pipeline.models.loading import load_model
from llm_pipeline.output_files import (
    EVALUATION_REPORT_FILE,
    METRICS_FILE,
    PREDICTIONS_FILE,
    RESOLVED_CONFIG_FILE,
)
from llm_pipeline.progress import status
from llm_pipeline.storage import to_uri
from llm_pipeline.tasks import DEFAULT_TASK, TASKS, ModelKind, Task, get_task
from llm_pipeline.tasks.text_classification.labels import LabelSet
from llm_pipeline.tasks.text_classification.model import build_classifier

__all__ = [
    "BASE_MODEL",
    "EVALUATION_REPORT_FILE",
    "METRICS_FILE",
    "PREDICTIONS_FILE",
    "EvaluationResult",
    "distinct_share",
    "evaluate_model",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluationResult:
    """What one evaluation produced: flat metrics, full ROUGE results, and where it wrote.

    `metrics` holds the task's ROUGE scores (summarization: rouge1/rouge2/rougeL/rougeLsum;
    instruction tuning: rougeL), each with `_low`/`_high` (the 95% bootstrap interval;
    absent when bootstrap_samples is 0), the task's `exact_match` and `perplexity` where it
    has them, `distinct_predictions`, `gen_len` (mean generated tokens), `samples`, `seconds`
    (load, generate, score), `generation_seconds`, and the baselines' scores prefixed
    `lead{k}_` (summarization) and `base_` (the model before fine-tuning).

    A classifier's `metrics` hold `accuracy`, `macro_f1` and `weighted_f1` (0..1, as
    scikit-learn computes them) with their intervals, `samples`, `seconds`,
    `scoring_seconds`, and the baselines' prefixed `majority_` and `base_`; it has no ROUGE
    (`rouge` and `baseline` are None).
    """

    split: str
    metrics: dict[str, float]
    rouge: RougeResult | None
    baseline: RougeResult | None
    output_dir: Path

    @property
    def predictions_path(self) -> Path:
        return self.output_dir / PREDICTIONS_FILE

    @property
    def report_path(self) -> Path:
        return self.output_dir / EVALUATION_REPORT_FILE


def evaluate_model(
    *,
    model_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
    config: EvaluateConfig,
    output_dir: str | os.PathLike[str],
    split: str | None = None,
    task: str = DEFAULT_TASK,
) -> EvaluationResult:
    """Generate the model's outputs for the evaluation split and score them; write them.

    `task` (a `tasks.TASKS` name) says what the model does and how it is scored; settings
    `config` leaves unset take the task's defaults. `split` defaults to `test` when the
    dataset has one, else `validation`. `output_dir` receives predictions.jsonl,
    metrics.json and report.html, all or nothing. Under torchrun every rank must call this;
    every rank gets the result. Raises EvaluationError for a model folder or dataset that
    cannot be evaluated.
    """
    started = time.perf_counter()
    rank, _ = init_distributed()
    chosen = _task(task)
    config = with_task_defaults(config, chosen)
    folder = Path(to_uri(str(output_dir)))
    if chosen.model_kind == "classifier":
        return _evaluate_classifier(
            model_dir, dataset_dir, config, folder, split, chosen, started=started, rank=rank
        )
    examples = load_examples(dataset_dir, split, config.max_samples, chosen)
    model, tokenizer = load_for_evaluation(model_dir, chosen)
    generation_started = time.perf_counter()
    outputs = run_model(model, tokenizer, examples, config, chosen)
    generation_seconds = time.perf_counter() - generation_started
    del model  # no longer needed: free its memory (GPU memory too) before scoring
    base = None
    if config.score_base_model:
        status("generating with the model as it was before fine-tuning (baseline)")
        base_model = load_base_model(model_dir, tokenizer, kind=chosen.model_kind)
        base = run_model(base_model, tokenizer, examples, config, chosen)
        del base_model
    if rank != 0:
        return _result_from_rank0()
    assert outputs is not None  # rank 0 always holds the gathered outputs

    def score() -> EvaluationResult:
        assert outputs is not None
        metrics, rouge, lead = score_and_write(
            task=chosen,
            examples=examples,
            outputs=outputs,
            config=config,
            output_dir=folder,
            started=started,
            generation_seconds=generation_seconds,
            base=base,
        )
        return EvaluationResult(examples.split, metrics, rouge, lead, folder)

    return _scored_on_rank0(score, chosen)


def _evaluate_classifier(
    model_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
    config: EvaluateConfig,
    folder: Path,
    split: str | None,
    task: Task,
    *,
    started: float,
    rank: int,
) -> EvaluationResult:
    """`evaluate_model` for a classifier: label probabilities from one forward pass per
    batch, scored beside the majority class and the model before fine-tuning."""
    examples = load_classifier_examples(dataset_dir, split, config.max_samples)
    model, tokenizer = load_for_evaluation(model_dir, task)
    labels = _model_labels(model, examples, model_dir, dataset_dir)
    scoring_started = time.perf_counter()
    probabilities = classify(model, tokenizer, examples, config)
    scoring_seconds = time.perf_counter() - scoring_started
    del model
    base = None
    if config.score_base_model:
        status("scoring labels with the model as it was before fine-tuning (baseline)")
        base_model = load_base_model(model_dir, tokenizer, kind=task.model_kind, labels=labels)
        base = classify(base_model, tokenizer, examples, config)
        del base_model
    if rank != 0:
        return _result_from_rank0()

    def score() -> EvaluationResult:
        assert probabilities is not None  # rank 0 always holds the gathered outputs
        metrics = score_classifier_and_write(
            task=task,
            examples=examples,
            labels=labels,
            probabilities=probabilities,
            config=config,
            output_dir=folder,
            started=started,
            scoring_seconds=scoring_seconds,
            base=base,
        )
        return EvaluationResult(examples.split, metrics, None, None, folder)

    return _scored_on_rank0(score, task)


def _model_labels(
    model: Any,
    examples: ClassifierExamples,
    model_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
) -> LabelSet:
    """The model's label set, once it is known to be the dataset's (the same names in the
    same id order, single- or multi-label alike)."""
    labels = LabelSet.from_model_config(model.config)
    theirs = examples.labels
    if labels.names != theirs.names or labels.multi_label != theirs.multi_label:
        kind = {False: "single-label", True: "multi-label"}
        raise EvaluationError(
            f"model folder {model_dir} scores the {kind[labels.multi_label]} labels "
            f"{list(labels.names)}, but dataset {dataset_dir} has the {kind[theirs.multi_label]} "
            f"labels {list(theirs.names)} (in id order): evaluate a model trained on this "
            "dataset's preprocess output"
        )
    return labels


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
    model_dir: str | os.PathLike[str],
    tokenizer: Any,
    *,
    kind: ModelKind = "seq2seq",
    labels: LabelSet | None = None,
) -> Any:
    """The model the fine-tuned one started from, rebuilt from the `model` settings recorded
    in its folder with the training seed (so a random initialisation is the same one).

    A classifier (`labels` given) is its source with a new head for `labels`, initialised
    from that seed: what scores before fine-tuning is the encoder and a random head.
    """
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
        if kind == "classifier":
            if labels is None:
                raise ValueError("a classifier's base model needs its label set")
            model = build_classifier(model_config, tokenizer, labels.model_config_fields())
        else:
            model = load_model(model_config, tokenizer, kind=kind)
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


def main(argv: list[str] | None = None) -> None:
    """`[torchrun ...] python -m llm_pipeline.evaluation.evaluate_model --model M --dataset D ...`

    A user's mistake is printed as one `ERROR: evaluate failed:` line and exit code 1 (the
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
        )
    except UserError as exc:
        print(f"ERROR: evaluate failed: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if is_rank0:
        print(json.dumps(result.metrics, indent=2))


if __name__ == "__main__":
    # Here, not as a decorator: in-process callers (tests) keep their own fault handler.
    record(main)()
