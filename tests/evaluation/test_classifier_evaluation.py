"""The evaluate step on a classifier, end to end: a tiny trained BERT and a preprocessed
dataset in the contract's format (tests/evaluation/classifier_fixtures.py), scored as the
pipeline scores it; what it writes equals scikit-learn on the same predictions, the
baselines are what they say, and the report's confusion matrix shows in a real browser.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score

from llm_pipeline import components
from llm_pipeline.config import DeployConfig, VertexConfig
from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.evaluate_model import evaluate_in_processes, evaluate_model
from llm_pipeline.evaluation.scoring import score_and_write
from llm_pipeline.output_files import (
    CONFUSION_MATRIX_FILE,
    EVALUATION_REPORT_FILE,
    METRICS_FILE,
    PREDICTIONS_FILE,
)
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.text_classification.examples import ClassifierExamples
from llm_pipeline.tasks.text_classification.labels import LABEL_SET_KEY, LabelSet
from llm_pipeline.tasks.text_classification.model import load_classifier

from ..chromium import devtools, png_pixels
from . import classifier_fixtures as fixtures

TASK = "text_classification"
HEADLINE = ("accuracy", "macro_f1", "weighted_f1")
TEST_ROWS = sum(fixtures.SPLIT_COUNTS["test"].values())


class Sink(SimpleNamespace):
    """What the step needs of KFP's Metrics artifact."""

    def log_metric(self, name: str, value: float) -> None:
        self.values[name] = value


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fixtures.build_dataset(tmp_path_factory.mktemp("classify") / "dataset")


@pytest.fixture(scope="module")
def model_dir(dataset_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fixtures.build_classifier(tmp_path_factory.mktemp("classifier") / "model", dataset_dir)


@pytest.fixture(scope="module")
def evaluated(
    model_dir: Path, dataset_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> SimpleNamespace:
    """The evaluate step run as the evaluate component runs it (batches of 4 of 26 rows)."""
    out = tmp_path_factory.mktemp("evaluated")
    sink = Sink(path=str(out / "metrics"), values={})
    components.evaluate.python_func(
        task=TASK,
        evaluate=EvaluateConfig(batch_size=4, bootstrap_samples=200, seed=1).model_dump_json(),
        model=SimpleNamespace(path=str(model_dir)),
        dataset=SimpleNamespace(path=str(dataset_dir)),
        metrics=sink,
        report=SimpleNamespace(path=str(out / "report.html")),
        predictions=SimpleNamespace(path=str(out / "predictions")),
        # Nothing is served (an empty registry): no champion to score.
        deploy=DeployConfig(registry_dir=str(out / "registry")).model_dump_json(),
        vertex=VertexConfig().model_dump_json(),
        evaluation_data=str(out / "evaluation_data"),
        champion=str(out / "champion"),
    )
    folder = out / "predictions"
    rows = [json.loads(line) for line in (folder / PREDICTIONS_FILE).read_text().splitlines()]
    return SimpleNamespace(
        metrics=sink.values, folder=folder, rows=rows, report=out / "report.html"
    )


def _ids(names: list[str]) -> np.ndarray:
    return np.array([fixtures.NAMES.index(name) for name in names])


def test_predictions_are_the_models_own_row_by_row(
    evaluated: SimpleNamespace, model_dir: Path, dataset_dir: Path
) -> None:
    test = datasets.load_from_disk(str(dataset_dir))["test"]
    rows = evaluated.rows
    assert [row["index"] for row in rows] == list(range(TEST_ROWS))
    assert [row["text"] for row in rows] == test["text"]
    assert [row["reference"] for row in rows] == test["label"]
    # Unpadded, one row at a time: batching and padding change nothing.
    model, _ = load_classifier(model_dir, device=torch.device("cpu"))
    for row, ids, types in zip(rows, test["input_ids"], test["token_type_ids"], strict=True):
        with torch.no_grad():
            logits = model(
                input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types])
            ).logits
        probs = logits.softmax(-1)[0].tolist()
        assert list(row["scores"].values()) == pytest.approx(probs, abs=1e-5)
        assert row["prediction"] == fixtures.NAMES[int(np.argmax(probs))]
        assert row["score"] == pytest.approx(max(probs), abs=1e-5)
        assert row["correct"] == (row["prediction"] == row["reference"])
    assert len({row["prediction"] for row in rows}) > 1  # the model reads its input


def test_metrics_equal_scikit_learns_on_the_written_predictions(
    evaluated: SimpleNamespace,
) -> None:
    y_true = _ids([row["reference"] for row in evaluated.rows])
    y_pred = _ids([row["prediction"] for row in evaluated.rows])
    metrics = evaluated.metrics
    assert metrics["accuracy"] == pytest.approx(accuracy_score(y_true, y_pred))
    assert metrics["macro_f1"] == pytest.approx(
        f1_score(y_true, y_pred, average="macro", zero_division=0)
    )
    assert metrics["weighted_f1"] == pytest.approx(
        f1_score(y_true, y_pred, average="weighted", zero_division=0)
    )
    for name in HEADLINE:
        for prefix in ("", "majority_", "base_"):
            low, value, high = (metrics[f"{prefix}{name}{s}"] for s in ("_low", "", "_high"))
            assert 0 <= low <= value <= high <= 1, (prefix, name)
    assert metrics["samples"] == TEST_ROWS
    assert metrics["seconds"] >= metrics["scoring_seconds"] > 0
    written = json.loads((evaluated.folder / METRICS_FILE).read_text())
    assert written == pytest.approx(metrics)


def test_the_step_hands_the_gate_its_fingerprint_and_no_champion_when_nothing_is_served(
    evaluated: SimpleNamespace, dataset_dir: Path
) -> None:
    from llm_pipeline.evaluation.fingerprint import evaluation_fingerprint
    from llm_pipeline.registry import Champion

    out = evaluated.folder.parent
    settings = EvaluateConfig(batch_size=4, bootstrap_samples=200, seed=1)
    expected = evaluation_fingerprint(dataset_dir, settings, get_task(TASK))
    assert (out / "evaluation_data").read_text() == expected
    assert Champion.from_json((out / "champion").read_text()) == Champion()
    assert not (evaluated.folder / "champion").exists()


def test_the_majority_baseline_predicts_the_most_frequent_training_label(
    evaluated: SimpleNamespace,
) -> None:
    y_true = _ids([row["reference"] for row in evaluated.rows])
    majority = np.zeros_like(y_true)  # "sports": 30 of the 55 training rows
    metrics = evaluated.metrics
    assert metrics["majority_accuracy"] == pytest.approx(12 / TEST_ROWS)
    assert metrics["majority_macro_f1"] == pytest.approx(
        f1_score(y_true, majority, average="macro", zero_division=0)
    )
    # Trained, the model beats it where it counts: on every label alike.
    assert metrics["macro_f1"] > metrics["majority_macro_f1"]
    assert metrics["accuracy"] > metrics["majority_accuracy"]
    # Before fine-tuning, the encoder with a fresh head: no better than chance here.
    assert metrics["base_macro_f1"] < metrics["macro_f1"]


def test_the_confusion_matrix_is_written_as_scikit_learn_counts_it(
    evaluated: SimpleNamespace,
) -> None:
    written = json.loads((evaluated.folder / CONFUSION_MATRIX_FILE).read_text())
    y_true = _ids([row["reference"] for row in evaluated.rows])
    y_pred = _ids([row["prediction"] for row in evaluated.rows])
    assert written["labels"] == list(fixtures.NAMES)
    assert written["matrix"] == confusion_matrix(y_true, y_pred, labels=[0, 1, 2]).tolist()
    assert [written["per_label"][name]["support"] for name in fixtures.NAMES] == [12, 8, 6]
    f1s = f1_score(y_true, y_pred, average=None, labels=[0, 1, 2], zero_division=0)
    assert [written["per_label"][n]["f1"] for n in fixtures.NAMES] == pytest.approx(f1s)


def test_the_report_shows_scores_baselines_labels_matrix_and_wrong_examples_first(
    evaluated: SimpleNamespace,
) -> None:
    page = evaluated.report.read_text(encoding="utf-8")
    assert (evaluated.folder / EVALUATION_REPORT_FILE).read_text(encoding="utf-8") == page
    task = get_task(TASK)
    assert f"<h1>{task.report_title}</h1>" in page
    assert "majority class (sports)" in page and "before fine-tuning" in page
    accuracy = evaluated.metrics["accuracy"]
    assert f"{accuracy:.3f}" in page
    for name in fixtures.NAMES:
        assert f"<td>{name}</td>" in page
    written = json.loads((evaluated.folder / CONFUSION_MATRIX_FILE).read_text())
    counts = [int(n) for n in re.findall(r'<g class="cell" data-count="(\d+)">', page)]
    assert counts == [n for row in written["matrix"] for n in row]
    verdicts = re.findall(r'<div class="ex (right|wrong)">', page)
    wrong = sum(not row["correct"] for row in evaluated.rows)
    assert verdicts == ["wrong"] * wrong + ["right"] * (len(verdicts) - wrong)
    assert "<script" not in page
    # 26 rows are too few for a gate to trust, and the page says so before the scores.
    assert f"evaluated on {TEST_ROWS} test row(s), fewer than the 30 a gate can trust" in page


def test_the_confusion_matrix_renders_darker_for_larger_counts(
    evaluated: SimpleNamespace, tmp_path: Path
) -> None:
    with devtools(work=tmp_path, size="1200,2400") as browser:
        browser.open(evaluated.report.as_uri())
        cells = browser.evaluate(
            "[...document.querySelectorAll('#confusion-matrix g.cell')].map(g => {"
            " const r = g.querySelector('rect').getBoundingClientRect();"
            " return [Number(g.dataset.count), r.x, r.y, r.width, r.height]; })"
        )
        shot = browser.screenshot(tmp_path / "report.png")
    assert len(cells) == len(fixtures.NAMES) ** 2
    _, _, pixels = png_pixels(shot)
    shades = []
    for count, x, y, width, height in cells:
        assert width > 20 and height > 20
        # A corner of the cell, clear of the count written in its middle.
        r, g, b = pixels[int(y + 5)][int(x + 5)]
        shades.append((count, 765 - (r + g + b)))  # darkness: 0 is white
    by_count = sorted(shades)
    darkness = [shade for _, shade in by_count]
    assert darkness == sorted(darkness), by_count  # more rows, darker cell
    empty = [shade for count, shade in shades if count == 0]
    assert empty and max(empty) < 10  # an empty cell is white
    assert by_count[-1][1] > 300  # the largest count is a deep blue


def test_an_untrained_model_scores_as_its_base_and_pairs_are_read_as_pairs(
    tmp_path: Path,
) -> None:
    dataset = fixtures.build_dataset(tmp_path / "pairs", pairs=True)
    model = fixtures.build_classifier(tmp_path / "untrained", dataset, steps=0)
    result = evaluate_model(
        model_dir=model,
        dataset_dir=dataset,
        config=EvaluateConfig(batch_size=8, bootstrap_samples=0),
        output_dir=tmp_path / "out",
        task=TASK,
    )
    metrics = result.metrics
    assert result.split == "test"
    # Rebuilt from the recorded settings and seed, the un-fine-tuned model is this one.
    for name in HEADLINE:
        assert metrics[f"base_{name}"] == pytest.approx(metrics[name])
        assert f"{name}_low" not in metrics  # bootstrap_samples 0: no intervals
    rows = [json.loads(line) for line in result.predictions_path.read_text().splitlines()]
    test = datasets.load_from_disk(str(dataset))["test"]
    assert [row["text_pair"] for row in rows] == test["text_pair"]
    # The pair's segment ids reach the model: scored alone, row 0 gives the same scores.
    loaded, _ = load_classifier(model, device=torch.device("cpu"))
    with torch.no_grad():
        logits = loaded(
            input_ids=torch.tensor([test[0]["input_ids"]]),
            token_type_ids=torch.tensor([test[0]["token_type_ids"]]),
        ).logits
    assert list(rows[0]["scores"].values()) == pytest.approx(
        logits.softmax(-1)[0].tolist(), abs=1e-5
    )


def _copy(dataset_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "dataset"
    shutil.copytree(dataset_dir, copy)
    return copy


def _evaluate(model_dir: Path, dataset_dir: Path, tmp_path: Path) -> Any:
    return evaluate_model(
        model_dir=model_dir,
        dataset_dir=dataset_dir,
        config=EvaluateConfig(bootstrap_samples=0, score_base_model=False),
        output_dir=tmp_path / "out",
        task=TASK,
    )


def test_a_dataset_with_other_labels_than_the_model_is_refused(
    model_dir: Path, dataset_dir: Path, tmp_path: Path
) -> None:
    copy = _copy(dataset_dir, tmp_path)
    other = LabelSet(names=("music", "sports", "weather"))
    (copy / "preprocess.json").write_text(json.dumps({LABEL_SET_KEY: other.to_dict()}))
    with pytest.raises(EvaluationError, match=r"\['sports', 'weather', 'music'\].*\['music'"):
        _evaluate(model_dir, copy, tmp_path)


def test_a_dataset_without_its_label_set_is_refused(
    model_dir: Path, dataset_dir: Path, tmp_path: Path
) -> None:
    copy = _copy(dataset_dir, tmp_path)
    (copy / "preprocess.json").unlink()
    with pytest.raises(EvaluationError, match=r"preprocess\.json: missing"):
        _evaluate(model_dir, copy, tmp_path)


def test_label_ids_outside_the_label_set_are_counted_in_the_message(
    model_dir: Path, dataset_dir: Path, tmp_path: Path
) -> None:
    loaded = datasets.load_from_disk(str(dataset_dir))
    test = loaded["test"].map(
        lambda row, i: {"labels": -1 if i < 3 else row["labels"]}, with_indices=True
    )
    folder = tmp_path / "dataset"
    datasets.DatasetDict({"train": loaded["train"], "test": test}).save_to_disk(str(folder))
    shutil.copy(dataset_dir / "preprocess.json", folder / "preprocess.json")
    with pytest.raises(EvaluationError, match=r"3 rows have label ids outside 0\.\.2"):
        _evaluate(model_dir, folder, tmp_path)


def test_a_model_folder_without_a_classification_head_is_refused(
    dataset_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "masked-lm"
    folder.mkdir()
    config = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 32}
    (folder / "config.json").write_text(json.dumps(config))
    refusal = r"BertForMaskedLM model .*, not a sequence classifier"
    with pytest.raises(EvaluationError, match=refusal):
        _evaluate(folder, dataset_dir, tmp_path)


def test_multi_label_scores_are_subset_accuracy_and_f1s_over_the_indicator_matrix(
    tmp_path: Path,
) -> None:
    names = ("urgent", "billing", "bug")
    labels = LabelSet(names=names, multi_label=True, threshold=0.5, train_counts={"bug": 9})
    references = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 0, 0]])
    probabilities = np.array(
        [[0.9, 0.1, 0.7], [0.2, 0.4, 0.1], [0.1, 0.3, 0.8], [0.6, 0.9, 0.6], [0.1, 0.2, 0.3]]
    )
    predicted = (probabilities >= 0.5).astype(int)
    examples = ClassifierExamples(
        split="test",
        texts=[f"ticket {i}" for i in range(5)],
        text_pairs=None,
        input_ids=[[1, 2]] * 5,
        token_type_ids=None,
        references=references,
        labels=labels,
        train_counts=labels.train_counts,
    )
    metrics = score_and_write(
        scorer=get_task(TASK).scorer(),
        examples=examples,
        outputs=probabilities,
        config=EvaluateConfig(bootstrap_samples=100),
        output_dir=tmp_path / "out",
        started=0.0,
        run_seconds=0.1,
    )
    assert metrics["accuracy"] == pytest.approx(accuracy_score(references, predicted)) == 0.6
    for average in ("macro", "weighted"):
        assert metrics[f"{average}_f1"] == pytest.approx(
            f1_score(references, predicted, average=average, zero_division=0)
        )
    # The majority "class" of a multi-label set: the most frequent label, alone.
    majority = np.zeros_like(references)
    majority[:, 2] = 1
    assert metrics["majority_accuracy"] == pytest.approx(accuracy_score(references, majority))
    written = json.loads((tmp_path / "out" / CONFUSION_MATRIX_FILE).read_text())
    assert written["matrices"]["bug"] == [[2, 1], [0, 2]]  # [[tn, fp], [fn, tp]]
    rows = [json.loads(line) for line in (tmp_path / "out" / PREDICTIONS_FILE).open()]
    assert rows[0]["reference"] == ["urgent", "bug"] and rows[0]["prediction"] == ["urgent", "bug"]
    assert rows[1]["prediction"] == [] and rows[1]["correct"] is False
    page = (tmp_path / "out" / EVALUATION_REPORT_FILE).read_text()
    assert all(f'id="confusion-matrix-{i}"' in page for i in range(3))


@pytest.mark.slow
def test_two_processes_score_what_one_scores(
    model_dir: Path, dataset_dir: Path, tmp_path: Path
) -> None:
    config = EvaluateConfig(batch_size=4, bootstrap_samples=50, seed=1)
    outputs = {
        processes: evaluate_in_processes(
            model_dir=model_dir,
            dataset_dir=dataset_dir,
            config=config.model_copy(update={"processes": processes}),
            output_dir=tmp_path / f"p{processes}",
            task=TASK,
        )
        for processes in (1, 2)
    }
    one, two = (
        [json.loads(line) for line in (outputs[n].output_dir / PREDICTIONS_FILE).open()]
        for n in (1, 2)
    )
    assert len(two) == TEST_ROWS
    # Each rank pads its own batches: the scores agree to float noise, the rest exactly.
    for mine, theirs in zip(two, one, strict=True):
        assert list(mine.pop("scores").values()) == pytest.approx(
            list(theirs.pop("scores").values()), abs=1e-5
        )
        assert mine.pop("score") == pytest.approx(theirs.pop("score"), abs=1e-5)
        assert mine == theirs
    timings = {"seconds", "scoring_seconds"}
    drop = lambda m: {k: v for k, v in m.items() if k not in timings}  # noqa: E731
    assert drop(outputs[2].metrics) == pytest.approx(drop(outputs[1].metrics))
