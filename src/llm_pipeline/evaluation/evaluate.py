"""The evaluate step: summaries for the evaluation split, ROUGE beside a lead-k baseline.

`evaluate_model` reads as the step's table of contents: pick the split, load the model,
generate, score the model and the baseline through the same ROUGE path, write the outputs.
It also runs under torchrun (`python -m llm_pipeline.evaluation.evaluate`, see `main`):
generation is sharded across the processes and rank 0 scores and writes; such a process dies
with the launcher that started it (`train.lifetime`), armed before the imports below.
"""

from __future__ import annotations

from llm_pipeline.train.lifetime import die_with_parent

if __name__ == "__main__":
    die_with_parent()

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.config.model import ModelConfig
from llm_pipeline.errors import UserError
from llm_pipeline.evaluation.baselines import lead_k
from llm_pipeline.evaluation.errors import EvaluationError
from llm_pipeline.evaluation.examples import EvaluationExamples, load_examples
from llm_pipeline.evaluation.generate import (
    Generated,
    build_generation_config,
    generate_sharded,
    init_distributed,
    load_seq2seq,
)
from llm_pipeline.evaluation.report import render_report
from llm_pipeline.evaluation.rouge import ROUGE_TYPES, RougeResult, compute_rouge
from llm_pipeline.models.generation import default_device, inference_dtype
from llm_pipeline.models.loading import load_model
from llm_pipeline.output_files import (
    METRICS_FILE,
    PREDICTIONS_FILE,
    REPORT_FILE,
    RESOLVED_CONFIG_FILE,
)
from llm_pipeline.progress import status
from llm_pipeline.storage import atomic_output_dir, to_uri

if TYPE_CHECKING:
    from transformers import GenerationConfig

__all__ = ["METRICS_FILE", "PREDICTIONS_FILE", "REPORT_FILE", "EvaluationResult", "evaluate_model"]

logger = logging.getLogger(__name__)

#: The un-fine-tuned model's name among the baselines.
BASE_MODEL = "before fine-tuning"


@dataclass(frozen=True)
class EvaluationResult:
    """What one evaluation produced: flat metrics, full ROUGE results, and where it wrote.

    `metrics` holds rouge1/rouge2/rougeL/rougeLsum, each with `_low`/`_high` (the 95%
    bootstrap interval; absent when bootstrap_samples is 0), `gen_len` (mean generated
    tokens), `samples`, `seconds` (load, generate, score), `generation_seconds`, and the
    baseline's scores prefixed `lead{k}_`.
    """

    split: str
    metrics: dict[str, float]
    rouge: RougeResult
    baseline: RougeResult | None
    output_dir: Path

    @property
    def predictions_path(self) -> Path:
        return self.output_dir / PREDICTIONS_FILE

    @property
    def report_path(self) -> Path:
        return self.output_dir / REPORT_FILE


def evaluate_model(
    *,
    model_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
    config: EvaluateConfig,
    output_dir: str | os.PathLike[str],
    split: str | None = None,
) -> EvaluationResult:
    """Generate summaries for the evaluation split and score them; write the outputs.

    `split` defaults to `test` when the dataset has one, else `validation`. `output_dir`
    receives predictions.jsonl, metrics.json and report.html, all or nothing. Under torchrun
    every rank must call this; every rank gets the result. Raises EvaluationError for a
    model folder or dataset that cannot be evaluated.
    """
    started = time.perf_counter()
    rank, _ = init_distributed()
    examples = load_examples(dataset_dir, split, config.max_samples)
    model, tokenizer = load_seq2seq(model_dir)
    _log_settings(examples, build_generation_config(model, tokenizer, config), config)
    generation_started = time.perf_counter()
    generated = generate_sharded(model, tokenizer, examples.input_ids, config=config)
    generation_seconds = time.perf_counter() - generation_started
    del model  # no longer needed: free its memory (GPU memory too) before scoring
    base = None
    if config.score_base_model:
        status("generating with the model as it was before fine-tuning (baseline)")
        base_model = load_base_model(model_dir, tokenizer)
        base = generate_sharded(base_model, tokenizer, examples.input_ids, config=config)
        del base_model
    if rank != 0:
        return _result_from_rank0()
    assert generated is not None  # rank 0 always holds the gathered summaries
    try:
        result = _score_and_write(
            examples,
            generated,
            config,
            Path(to_uri(str(output_dir))),
            started,
            generation_seconds,
            base=base,
        )
    except BaseException as exc:
        _share_with_other_ranks(f"{type(exc).__name__}: {exc}")
        raise
    _share_with_other_ranks(result)
    return result


def _log_settings(
    examples: EvaluationExamples, generation: GenerationConfig, config: EvaluateConfig
) -> None:
    # What actually ran, after falling back to the model's generation config.
    logger.info(
        "generating %d summaries for split %r: batch %d, max_new_tokens %s (max_length %s), "
        "min_new_tokens %s, num_beams %s, length_penalty %s, no_repeat_ngram_size %s",
        len(examples.input_ids),
        examples.split,
        config.batch_size,
        generation.max_new_tokens,
        generation.max_length,
        generation.min_new_tokens,
        generation.num_beams,
        generation.length_penalty,
        generation.no_repeat_ngram_size,
    )


def _score_and_write(
    examples: EvaluationExamples,
    generated: Generated,
    config: EvaluateConfig,
    output_dir: Path,
    started: float,
    generation_seconds: float,
    *,
    base: Generated | None = None,
) -> EvaluationResult:
    status(f"scoring {len(generated.texts)} summaries with ROUGE")
    rouge = _score(generated.texts, examples.references, config)
    baselines: dict[str, RougeResult] = {}
    if config.lead_k:
        leads = [lead_k(document, config.lead_k) for document in examples.documents]
        baselines[f"lead-{config.lead_k}"] = _score(leads, examples.references, config)
    if base is not None:
        baselines[BASE_MODEL] = _score(base.texts, examples.references, config)
    intervals = config.bootstrap_samples > 0
    metrics = _metrics(rouge, intervals)
    metrics["distinct_predictions"] = distinct_share(generated.texts)
    metrics["gen_len"] = sum(generated.token_counts) / len(generated.token_counts)
    metrics["samples"] = float(len(generated.texts))
    metrics["seconds"] = time.perf_counter() - started
    metrics["generation_seconds"] = generation_seconds
    if config.lead_k:
        metrics |= _metrics(baselines[f"lead-{config.lead_k}"], intervals, f"lead{config.lead_k}_")
    if base is not None:
        metrics |= _metrics(baselines[BASE_MODEL], intervals, prefix="base_")
        metrics["base_distinct_predictions"] = distinct_share(base.texts)
    with atomic_output_dir(output_dir) as staging:
        _write_predictions(staging / PREDICTIONS_FILE, examples, generated, rouge)
        (staging / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
        page = render_report(
            model=rouge,
            baselines=baselines,
            documents=examples.documents,
            references=examples.references,
            predictions=generated.texts,
            facts={
                "split": examples.split,
                "samples": str(len(generated.texts)),
                "mean generated tokens": f"{metrics['gen_len']:.1f}",
                "distinct predictions": f"{100 * metrics['distinct_predictions']:.0f}%",
                "seconds": f"{metrics['seconds']:.1f}",
            },
        )
        (staging / REPORT_FILE).write_text(page, encoding="utf-8")
    logger.info(
        "%s: %s", examples.split, ", ".join(f"{k} {rouge.scores[k]:.2f}" for k in ROUGE_TYPES)
    )
    return EvaluationResult(
        split=examples.split,
        metrics=metrics,
        rouge=rouge,
        baseline=baselines.get(f"lead-{config.lead_k}"),
        output_dir=output_dir,
    )


def distinct_share(texts: Sequence[str]) -> float:
    """Share of the texts that are distinct (1.0: all differ; near 0: one text repeated):
    a model that has not learned to read its input writes the same summary for all."""
    return len({" ".join(text.split()) for text in texts}) / max(1, len(texts))


def load_base_model(model_dir: str | os.PathLike[str], tokenizer: Any) -> Any:
    """The model the fine-tuned one started from, rebuilt from the `model` settings recorded
    in its folder with the training seed (so a random initialisation is the same one)."""
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
        model = load_model(model_config, tokenizer)
    except UserError as exc:
        raise EvaluationError(f"evaluate.score_base_model: {exc}") from exc
    device = default_device()
    # The same device and precision as `load_seq2seq` gives the fine-tuned model.
    # transformers wraps `to` in a decorator that mypy misreads; the call itself is plain.
    cast(Any, model).to(device, dtype=inference_dtype(device))
    model.eval()
    return model


def _score(predictions: list[str], references: list[str], config: EvaluateConfig) -> RougeResult:
    return compute_rouge(
        predictions,
        references,
        use_stemmer=config.use_stemmer,
        # compute_rouge always resamples at least once; 0 means "no interval wanted".
        n_resamples=max(config.bootstrap_samples, 1),
        seed=config.seed,
    )


def _metrics(result: RougeResult, intervals: bool, prefix: str = "") -> dict[str, float]:
    values: dict[str, float] = {}
    for name in ROUGE_TYPES:
        values[prefix + name] = result.scores[name]
        if intervals:
            values[f"{prefix}{name}_low"], values[f"{prefix}{name}_high"] = result.intervals[name]
    return values


def _write_predictions(
    path: Path, examples: EvaluationExamples, generated: Generated, rouge: RougeResult
) -> None:
    """One JSON object per example, in dataset order, with its own scores."""
    with path.open("w", encoding="utf-8") as f:
        for i, prediction in enumerate(generated.texts):
            row: dict[str, Any] = {
                "index": i,
                "document": examples.documents[i],
                "reference": examples.references[i],
                "prediction": prediction,
                "gen_len": generated.token_counts[i],
            }
            row |= {name: float(rouge.per_example[name][i]) for name in ROUGE_TYPES}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


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
    """`[torchrun ...] python -m llm_pipeline.evaluation.evaluate --model M --dataset D ...`

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
