"""Preference tuning is scored on held-out pairs against the model the run started from: the
metrics follow their definitions on known log-probabilities, a model that is its reference
has exactly no preference, a tuned one's margins are its log-ratios against the reference,
the report shows the pairs, and the gate's default floor stops a model that talks worse."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, set_seed

from llm_pipeline.config import DeployPolicyConfig, ModelConfig, load_config
from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.evaluate_model import evaluate_model
from llm_pipeline.evaluation.fingerprint import evaluation_fingerprint
from llm_pipeline.evaluation.rouge import compute_rouge
from llm_pipeline.models.loading import load_model
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.output_files import RESOLVED_CONFIG_FILE
from llm_pipeline.registry.gate import decide
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.chat import ChatFormat
from llm_pipeline.tasks.kinds import CAUSAL_LM
from llm_pipeline.tasks.preference_tuning.collate import PairCollator
from llm_pipeline.tasks.preference_tuning.loss import pair_logps
from llm_pipeline.tasks.preference_tuning.metrics import preference_scores
from llm_pipeline.tasks.preference_tuning.preprocess import encode_pairs

from ...data.word_tokenizer import word_tokenizer
from ...offline_models import TINY_LLAMA

TASK = "preference_tuning"
SEED = 7
BETA = 0.5
ROWS = [
    {"prompt": "what is two plus three ?", "chosen": "four .", "rejected": "six ."},
    {"prompt": "name a colour .", "chosen": "blue .", "rejected": "four ."},
    {"prompt": "what is two plus two ?", "chosen": "four .", "rejected": "three ."},
    {"prompt": "be brief .", "chosen": "what ?", "rejected": "six and six ."},
    {"prompt": "name a colour and be brief .", "chosen": "blue", "rejected": "a <b>two</b>"},
    {"prompt": "what is six ?", "chosen": "six is six .", "rejected": "blue ."},
]
# A bootstrap small enough to be quick, large enough to draw an interval.
CONFIG = EvaluateConfig(bootstrap_samples=50, batch_size=4, max_new_tokens=4)


def rouge(texts: list[str], references: list[str]):
    return compute_rouge(texts, references, n_resamples=1)


def test_the_metrics_follow_their_definitions_on_known_log_probabilities() -> None:
    # Per pair (chosen, rejected) summed log-probs of the model and of its reference.
    own = np.array([[-1.0, -3.0], [-2.0, -2.0], [-4.0, -1.0], [-1.0, -2.0]])
    ref = np.array([[-2.0, -2.0], [-2.0, -2.0], [-2.0, -2.0], [-1.0, -2.0]])
    tuned, start = rouge(["a b", "c", "d", "e"], ["a b"] * 4), rouge(["a"] * 4, ["a b"] * 4)
    scores = preference_scores(own, ref, tuned, start, beta=0.5, n_resamples=100, seed=0)
    # Margins: β·(own gap − reference gap) = 0.5·(2 − 0), 0, 0.5·(−3 − 0), 0.5·(1 − 1).
    assert scores.margins.tolist() == [1.0, 0.0, -1.5, 0.0]
    m = scores.metrics
    assert m["preference_accuracy"] == (1 + 0.5 + 0 + 0.5) / 4  # zero margins count half
    assert m["reward_margin"] == pytest.approx(-0.5 / 4)
    assert m["chosen_preferred"] == (1 + 0.5 + 0 + 1) / 4  # the model's own gaps: 2, 0, −3, 1
    assert m["rougeL"] == tuned.scores["rougeL"]
    assert m["rougeL_change"] == pytest.approx(tuned.scores["rougeL"] - start.scores["rougeL"])
    assert list(m) == list(get_task(TASK).metric_names)
    for name, (low, high) in scores.intervals.items():
        assert low <= m[name] <= high, name


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The held-out pairs as the preprocess step writes them; a tiny random Llama saved as
    the finetune step saves one, with the settings it was built from (so the starting model
    rebuilt from them is the very same network); and a "tuned" copy whose weights moved."""
    root = tmp_path_factory.mktemp("preference-eval")
    words = word_tokenizer(root / "tokenizer")
    config = ModelConfig(architecture=dict(TINY_LLAMA), tokenizer=str(words))
    tokenizer = load_tokenizer(config, kind=CAUSAL_LM)
    encoded, _ = encode_pairs(
        datasets.DatasetDict({"test": datasets.Dataset.from_list(ROWS)}),
        chat_format=ChatFormat.for_tokenizer(tokenizer),
        max_length=64,
        work_dir=root / "work",
    )
    encoded.save_to_disk(root / "dataset")
    recorded = {
        "task": TASK,
        "model": config.model_dump(mode="json"),
        "train": {"seed": SEED, "dpo": {"beta": BETA}},
    }
    set_seed(SEED)
    model = load_model(config, tokenizer, kind=CAUSAL_LM)
    for name in ("start", "tuned"):
        if name == "tuned":
            with torch.no_grad():
                generator = torch.Generator().manual_seed(1)
                for weight in model.parameters():
                    weight.add_(0.5 * torch.randn(weight.shape, generator=generator))
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        (root / name / RESOLVED_CONFIG_FILE).write_text(json.dumps(recorded))
    return {"dataset": root / "dataset", "start": root / "start", "tuned": root / "tuned"}


def test_a_model_that_is_its_reference_has_exactly_no_preference(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    # score_base_model off, as the gate's champion is scored: this task runs it anyway.
    config = CONFIG.model_copy(update={"score_base_model": False})
    metrics = evaluate_model(
        model_dir=folders["start"],
        dataset_dir=folders["dataset"],
        config=config,
        output_dir=tmp_path / "out",
        task=TASK,
    ).metrics
    assert metrics["samples"] == len(ROWS)
    assert metrics["preference_accuracy"] == 0.5 and metrics["reward_margin"] == 0.0
    assert metrics["rougeL_change"] == 0.0
    for name in get_task(TASK).metric_names:
        assert metrics[f"{name}_low"] <= metrics[name] <= metrics[f"{name}_high"], name
        assert metrics[f"base_{name}"] == metrics[name], name


def test_a_tuned_model_is_scored_by_its_log_ratios_against_the_start(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    result = evaluate_model(
        model_dir=folders["tuned"],
        dataset_dir=folders["dataset"],
        config=CONFIG,
        output_dir=tmp_path / "out",
        task=TASK,
    )
    metrics = result.metrics
    # The margins computed here, independently, pair by pair.
    pairs = datasets.load_from_disk(str(folders["dataset"]))["test"]
    batch = PairCollator(pad_id=1)([dict(row) for row in pairs])
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "labels")}
    logps = {}
    for name in ("tuned", "start"):
        model = AutoModelForCausalLM.from_pretrained(folders[name]).eval()
        with torch.no_grad():
            out = pair_logps(model, inputs)
        logps[name] = (out.chosen - out.rejected).numpy()
    margins = BETA * (logps["tuned"] - logps["start"])
    assert metrics["reward_margin"] == pytest.approx(margins.mean(), abs=1e-4)
    wins = np.where(margins > 0, 1.0, np.where(margins == 0, 0.5, 0.0))
    assert metrics["preference_accuracy"] == pytest.approx(wins.mean())
    assert metrics["chosen_preferred"] == pytest.approx(np.mean(logps["tuned"] > 0))
    assert metrics["base_chosen_preferred"] == pytest.approx(np.mean(logps["start"] > 0))
    rows = [json.loads(line) for line in result.predictions_path.read_text().splitlines()]
    assert [row["chosen"] for row in rows] == pairs["chosen"]
    assert [row["reward_margin"] for row in rows] == pytest.approx(margins.tolist(), abs=1e-4)
    tuned_rouge = rouge([row["prediction"] for row in rows], pairs["chosen"])
    start_rouge = rouge([row["base_prediction"] for row in rows], pairs["chosen"])
    assert metrics["rougeL"] == pytest.approx(tuned_rouge.scores["rougeL"])
    assert metrics["rougeL_change"] == pytest.approx(
        tuned_rouge.scores["rougeL"] - start_rouge.scores["rougeL"]
    )
    page = result.report_path.read_text(encoding="utf-8")
    assert page.count('<div class="ex pair">') == len(ROWS)  # 6 pairs: 3 best, 3 worst
    largest = page.index("<h2>The 3 pairs with the largest margins")
    smallest = page.index("<h2>The 3 pairs with the smallest margins")
    order = np.argsort(-margins, kind="stable")
    for shown, index in enumerate(order):
        position = page.index(f'<div class="ex pair"><h3>#{index} — ')
        assert (largest < position < smallest) == (shown < 3), (shown, index)
    assert "<dt>chosen</dt><dd>six is six ." in page and "<dt>rejected</dt><dd>blue ." in page
    assert "a &lt;b&gt;two&lt;/b&gt;" in page and "<b>two</b>" not in page
    best = int(np.argmax(margins))
    gap = f"policy {logps['tuned'][best]:+.2f}, reference {logps['start'][best]:+.2f}"
    assert f"#{best} — margin {margins[best]:+.3f} (preferred)" in page and gap in page
    assert f"<b>beta:</b> {BETA:g} (train.dpo.beta" in page


def test_the_fingerprint_reads_the_pairs(folders: dict[str, Path], tmp_path: Path) -> None:
    task = get_task(TASK)
    same = evaluation_fingerprint(folders["dataset"], CONFIG, task)
    assert same == evaluation_fingerprint(folders["dataset"], CONFIG, task)
    table = datasets.load_from_disk(str(folders["dataset"]))["test"]
    swapped = table.map(lambda row: {"rejected_input_ids": row["chosen_input_ids"]})
    datasets.DatasetDict({"test": swapped}).save_to_disk(tmp_path / "other")
    assert evaluation_fingerprint(tmp_path / "other", CONFIG, task) != same


PREFERENCE = {
    "task": TASK,
    "data": {"dataset": "pairs.jsonl", "columns": {"prompt": "q", "chosen": "c", "rejected": "r"}},
    "model": {"source": "facebook/opt-125m"},
}


def test_the_gate_by_default_stops_a_model_whose_responses_got_worse() -> None:
    policy = load_config(raw=PREFERENCE).config.deploy_policy
    assert policy.metric == "preference_accuracy"
    assert policy.floors == {"rougeL_change": -2.0}
    better = {"preference_accuracy": 0.9, "rougeL_change": -0.5}
    assert decide(better, None, policy).deploy
    worse = decide({"preference_accuracy": 0.9, "rougeL_change": -3.0}, None, policy)
    assert not worse.deploy
    assert "below deploy_policy.floors (rougeL_change -3 < floor -2)" in worse.reason
    # A user's floor for the metric replaces the task's; the user's others are kept.
    raw = {**PREFERENCE, "deploy_policy": {"floors": {"rougeL_change": -5, "rougeL": 10}}}
    assert load_config(raw=raw).config.deploy_policy.floors == {"rougeL_change": -5, "rougeL": 10}
    assert DeployPolicyConfig().floors == {}  # the config fills it, by the task


def test_rows_without_pairs_or_ids_the_model_lacks_are_refused_by_name(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    scorer = get_task(TASK).scorer()
    table = datasets.load_from_disk(str(folders["dataset"]))["test"]
    datasets.DatasetDict({"test": table.remove_columns("rejected_labels")}).save_to_disk(
        tmp_path / "no-labels"
    )
    with pytest.raises(EvaluationError, match=r"has no 'rejected_labels' column.*preprocess"):
        scorer.load_examples(tmp_path / "no-labels", None, None)
    examples = scorer.load_examples(folders["dataset"], None, None)
    model, _ = scorer.load_model(folders["tuned"])
    model.resize_token_embeddings(5)  # a model of another, smaller vocabulary
    with pytest.raises(EvaluationError, match="has 5 token embeddings: the pairs were tokenized"):
        scorer.check_model(model, examples, folders["tuned"], folders["dataset"])
