"""Evaluating an instruction-tuned causal LM: exact match, perplexity and ROUGE-L equal values
computed by hand on fixed predictions; the whole step completes held-out prompts, scores the
un-fine-tuned model beside the tuned one, shards across processes, and its report shows
prompts, references and responses."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import datasets
import pytest
import torch
from transformers import set_seed

from llm_pipeline.config import ModelConfig
from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation import compute_rouge
from llm_pipeline.evaluation.evaluate_model import evaluate_in_processes, evaluate_model
from llm_pipeline.evaluation.examples import EvaluationExamples
from llm_pipeline.evaluation.scoring import ModelOutputs, score_and_write
from llm_pipeline.models.generation import Generated
from llm_pipeline.models.loading import load_model
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.output_files import RESOLVED_CONFIG_FILE
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.instruction_tuning.exact_match import exact_match, normalize_answer
from llm_pipeline.tasks.instruction_tuning.perplexity import response_nll
from llm_pipeline.tasks.kinds import CAUSAL_LM

from ..docstring_data import DocstringData
from ..instruction_data import write_instruction_dataset
from ..offline_models import MINILM, TINY_LLAMA

TASK = "instruction_tuning"
SEED = 7


def test_exact_match_ignores_case_and_spacing_but_not_punctuation() -> None:
    predictions = ["Paris", "  the  Answer\n", "42.", "ｆｕｌｌ width"]
    references = ["paris", "The answer", "42", "full width"]
    result = exact_match(predictions, references)
    assert result.per_example == [100.0, 100.0, 0.0, 100.0]
    assert result.score == 75.0
    assert normalize_answer(" A\u00a0B\tc ") == "a b c"


def test_perplexity_comes_from_the_response_tokens_of_known_logits() -> None:
    # Position t predicts token t + 1. Row 0: the prompt is token 0, the response tokens 1
    # and 2 are predicted with p = 3/4 and 1/2. Row 1: its one response token with p = 1/5.
    logits = torch.zeros((2, 3, 5))
    logits[0, 0] = torch.log(torch.tensor([3.0, 1 / 4, 1 / 4, 1 / 4, 1 / 4]))
    logits[0, 1] = torch.log(torch.tensor([1 / 4, 1.0, 1 / 4, 1 / 4, 1 / 4]))
    labels = torch.tensor([[-100, 0, 1], [-100, -100, 4]])
    totals, counts = response_nll(logits, labels)
    assert counts.tolist() == [2, 1]
    assert totals[0].item() == pytest.approx(math.log(4 / 3) + math.log(2), abs=1e-5)
    assert totals[1].item() == pytest.approx(math.log(5), abs=1e-5)  # uniform over 5 tokens


@pytest.fixture
def fixed(tmp_path: Path) -> tuple[dict[str, float], Path]:
    """The scoring of fixed responses and response losses, written as the step writes."""
    examples = EvaluationExamples(
        split="test",
        documents=["Capital of France?", "Say <b>hi</b>.", "6 x 7?", "Describe a cat."],
        references=["Paris", "hi", "42", "the cat lay on the mat"],
        input_ids=[[1]] * 4,
    )
    model = ModelOutputs(
        Generated(["paris ", "Hi!", "42", "the cat sat on the mat"], [2, 3, 1, 6]),
        losses=[(math.log(8 / 3), 2), (math.log(5), 1), (0.0, 1), (math.log(7), 2)],
    )
    base = ModelOutputs(
        Generated(["London", "hi", "41", "a dog"], [1, 1, 1, 2]),
        losses=[(2.0, 2), (1.0, 1), (1.0, 1), (3.0, 2)],
    )
    metrics = score_and_write(
        scorer=get_task(TASK).scorer(),
        examples=examples,
        outputs=model,
        config=EvaluateConfig(bootstrap_samples=0, use_stemmer=True),
        output_dir=tmp_path / "out",
        started=0.0,
        run_seconds=1.0,
        base=base,
    )
    assert not any(name.startswith("lead") for name in metrics)  # no lead-k baseline
    return metrics, tmp_path / "out"


def test_metrics_of_fixed_responses_equal_hand_computed_values(
    fixed: tuple[dict[str, float], Path],
) -> None:
    metrics, _ = fixed
    assert metrics["exact_match"] == 50.0  # "paris " and "42"; "Hi!" keeps its "!"
    # Pooled over 6 response tokens: exp((ln 8/3 + ln 5 + 0 + ln 7) / 6).
    assert metrics["perplexity"] == pytest.approx((8 / 3 * 5 * 7) ** (1 / 6))
    # ROUGE-L F1 ×100: 100, 100, 100, and LCS "the cat on the mat" = 5 of 6 tokens each way.
    assert metrics["rougeL"] == pytest.approx((300 + 500 / 6) / 4)
    assert metrics["base_exact_match"] == 25.0
    assert metrics["base_perplexity"] == pytest.approx(math.exp(7 / 6))
    assert metrics["base_rougeL"] == pytest.approx(25.0)  # only "hi" = "hi"
    assert metrics["gen_len"] == 3.0 and metrics["samples"] == 4.0
    assert "rougeLsum" not in metrics and "rouge1" not in metrics


def test_predictions_and_report_show_prompts_references_and_responses(
    fixed: tuple[dict[str, float], Path],
) -> None:
    _, out = fixed
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert rows[3] == {
        "index": 3,
        "prompt": "Describe a cat.",
        "reference": "the cat lay on the mat",
        "prediction": "the cat sat on the mat",
        "gen_len": 6,
        "rougeL": pytest.approx(500 / 6),
        "exact_match": 0.0,
        "perplexity": pytest.approx(math.sqrt(7)),
        # The un-fine-tuned model's, so that base_* can be checked from the file too: it
        # was in none of it.
        "base_prediction": "a dog",
        "base_rougeL": 0.0,
        "base_exact_match": 0.0,
        "base_perplexity": pytest.approx(math.exp(3 / 2)),
    }
    # base_rougeL is the mean of the rows' base_rougeL.
    base = [row["base_rougeL"] for row in rows]
    assert base == [0.0, 100.0, 0.0, 0.0]
    page = (out / "report.html").read_text()
    assert "<h1>Instruction tuning evaluation</h1>" in page
    assert "<dt>prompt</dt><dd>Describe a cat.</dd>" in page
    assert "<dt>reference</dt><dd>the cat lay on the mat</dd>" in page
    assert "<dt>response</dt><dd>the cat sat on the mat</dd>" in page
    assert "Say &lt;b&gt;hi&lt;/b&gt;." in page and "<b>hi</b>" not in page
    table = page[page.index('<table id="scores">') : page.index("</table>")]
    assert "<td>exact_match</td><td>50.00</td><td>25.00</td>" in table
    # Perplexity falls below the baseline's: an improvement (lower is better), shown so.
    assert '<td>perplexity</td><td>2.13</td><td>3.21</td><td class="up">-1.08</td>' in table
    assert "words per response" in page


@pytest.fixture(scope="module")
def causal_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama saved as the finetune step saves one, with the settings it was
    built from: the un-fine-tuned baseline rebuilds the very same model from them."""
    folder = tmp_path_factory.mktemp("causal-model")
    config = ModelConfig(architecture=dict(TINY_LLAMA), tokenizer=MINILM)
    tokenizer = load_tokenizer(config, kind=CAUSAL_LM)
    set_seed(SEED)
    load_model(config, tokenizer, kind=CAUSAL_LM).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    recorded = {"task": TASK, "model": config.model_dump(mode="json"), "train": {"seed": SEED}}
    (folder / RESOLVED_CONFIG_FILE).write_text(json.dumps(recorded))
    return folder


@pytest.fixture(scope="module")
def instruction_dataset(
    tmp_path_factory: pytest.TempPathFactory, docstring_data: DocstringData, causal_model_dir: Path
) -> Path:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(causal_model_dir)
    splits = {
        "validation": docstring_data.rows("validation", 4),
        "test": docstring_data.rows("test", 12),
    }
    return write_instruction_dataset(tmp_path_factory.mktemp("sft-eval"), splits, tokenizer)


def _held_out_perplexity(model_dir: Path, dataset: Path) -> float:
    """The perplexity computed independently: the model's own (shifted) loss on each row."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    nll = tokens = 0.0
    for row in datasets.load_from_disk(str(dataset))["test"]:
        ids, labels = torch.tensor([row["input_ids"]]), torch.tensor([row["labels"]])
        count = int((labels[0, 1:] != -100).sum())
        with torch.no_grad():
            nll += model(input_ids=ids, labels=labels).loss.item() * count
        tokens += count
    return math.exp(nll / tokens)


def test_the_step_completes_prompts_and_scores_the_untuned_model_beside(
    causal_model_dir: Path, instruction_dataset: Path, tmp_path: Path
) -> None:
    result = evaluate_model(
        model_dir=causal_model_dir,
        dataset_dir=instruction_dataset,
        config=EvaluateConfig(bootstrap_samples=50, batch_size=5, max_new_tokens=8),
        output_dir=tmp_path / "out",
        task=TASK,
    )
    metrics = result.metrics
    assert result.split == "test" and metrics["samples"] == 12
    assert metrics["perplexity"] == pytest.approx(
        _held_out_perplexity(causal_model_dir, instruction_dataset), rel=1e-4
    )
    rows = [json.loads(line) for line in result.predictions_path.read_text().splitlines()]
    test = datasets.load_from_disk(str(instruction_dataset))["test"]
    assert [row["prompt"] for row in rows] == test["prompt"]
    assert all(0 < row["gen_len"] <= 8 for row in rows)
    predictions = [row["prediction"] for row in rows]
    rouge = compute_rouge(predictions, test["response"], n_resamples=1)
    assert metrics["rougeL"] == pytest.approx(rouge.scores["rougeL"])
    assert metrics["exact_match"] == exact_match(predictions, test["response"]).score
    assert {"rougeL_low", "rougeL_high", "base_rougeL", "base_exact_match"} <= set(metrics)
    # Scored by default for this task; rebuilt from the recorded settings and seed, the
    # un-fine-tuned model is here the same network, so it scores the same.
    assert metrics["base_perplexity"] == pytest.approx(metrics["perplexity"], rel=1e-5)
    assert metrics["base_rougeL"] == pytest.approx(metrics["rougeL"])


@pytest.mark.slow
def test_two_processes_score_what_one_scores(
    causal_model_dir: Path, instruction_dataset: Path, tmp_path: Path
) -> None:
    config = EvaluateConfig(
        bootstrap_samples=20, batch_size=4, max_new_tokens=6, score_base_model=False
    )
    outputs = {
        processes: evaluate_in_processes(
            model_dir=causal_model_dir,
            dataset_dir=instruction_dataset,
            config=config.model_copy(update={"processes": processes}),
            output_dir=tmp_path / f"p{processes}",
            env=dict(os.environ),
            task=TASK,
        )
        for processes in (1, 2)
    }
    one, two = (outputs[n].output_dir / "predictions.jsonl" for n in (1, 2))
    assert one.read_text() == two.read_text()
    timings = {"seconds", "generation_seconds"}
    drop = lambda m: {k: v for k, v in m.items() if k not in timings}  # noqa: E731
    assert drop(outputs[1].metrics) == pytest.approx(drop(outputs[2].metrics))


def test_the_step_scores_what_the_endpoints_engine_writes(
    causal_model_dir: Path, instruction_dataset: Path, tmp_path: Path
) -> None:
    """Through CTranslate2 in float32 the scores are transformers' (greedy texts token for
    token); in int8 the report scores transformers' texts beside the engine's."""
    from llm_pipeline.engines import EngineChoice

    config = EvaluateConfig(bootstrap_samples=0, batch_size=5, max_new_tokens=8)
    runs = {
        name: evaluate_model(
            model_dir=causal_model_dir,
            dataset_dir=instruction_dataset,
            config=config.model_copy(update={"score_base_model": False}),
            output_dir=tmp_path / name,
            task=TASK,
            engine=engine,
        )
        for name, engine in (
            ("transformers", None),
            ("float32", EngineChoice("ctranslate2", "float32")),
            ("int8", EngineChoice("ctranslate2", "int8")),
        )
    }
    plain, float32, int8 = (runs[name] for name in ("transformers", "float32", "int8"))
    assert float32.predictions_path.read_text() == plain.predictions_path.read_text()
    assert float32.metrics["rougeL"] == plain.metrics["rougeL"]
    assert not any(name.startswith("transformers_") for name in float32.metrics)
    # int8: its own texts, and transformers' float32 ones scored on the same rows beside them.
    assert int8.metrics["transformers_rougeL"] == pytest.approx(plain.metrics["rougeL"])
    report = int8.report_path.read_text()
    assert "ctranslate2 int8" in report and "transformers float32" in report
