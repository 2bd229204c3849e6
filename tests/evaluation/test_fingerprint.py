"""The fingerprint of an evaluation: the same rows and scoring settings give the same one,
anything that changes a score gives another, and how the work is split changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation.fingerprint import FINGERPRINT_LENGTH, evaluation_fingerprint
from llm_pipeline.tasks import get_task

from . import classifier_fixtures
from . import generate_fixtures as fixtures

eval_dataset_dir = fixtures.eval_dataset_dir
SUMMARIZATION = get_task("summarization")


def fingerprint(dataset: Path, **settings: object) -> str:
    return evaluation_fingerprint(dataset, EvaluateConfig(**settings), SUMMARIZATION)  # type: ignore[arg-type]


def test_the_same_evaluation_has_the_same_fingerprint_however_it_is_run(
    eval_dataset_dir: Path,
) -> None:
    first = fingerprint(eval_dataset_dir, max_samples=8)
    assert len(first) == FINGERPRINT_LENGTH and int(first, 16) >= 0  # a Vertex label value
    assert first == fingerprint(eval_dataset_dir, max_samples=8)
    # Batches, processes, intervals and baselines change no model's score on a row.
    assert first == fingerprint(
        eval_dataset_dir,
        max_samples=8,
        batch_size=2,
        processes=1,
        bootstrap_samples=0,
        lead_k=1,
        score_base_model=True,
    )


@pytest.mark.parametrize(
    "change", [{"max_samples": 9}, {"num_beams": 3}, {"max_new_tokens": 5}, {"use_stemmer": False}]
)
def test_other_rows_or_scoring_settings_change_it(
    eval_dataset_dir: Path, change: dict[str, object]
) -> None:
    assert fingerprint(eval_dataset_dir, max_samples=8) != fingerprint(
        eval_dataset_dir, **{"max_samples": 8, **change}
    )


def test_other_data_changes_it(eval_dataset_dir: Path, tmp_path: Path) -> None:
    import datasets

    loaded = datasets.load_from_disk(str(eval_dataset_dir))
    references = loaded["validation"]["summary"]
    edited = loaded["validation"].remove_columns("summary")
    edited = edited.add_column("summary", [references[0] + " again", *references[1:]])
    datasets.DatasetDict({"validation": edited}).save_to_disk(str(tmp_path / "edited"))
    assert fingerprint(tmp_path / "edited", max_samples=8) != fingerprint(
        eval_dataset_dir, max_samples=8
    )


def test_a_classification_evaluation_has_one_too(tmp_path: Path) -> None:
    dataset = classifier_fixtures.build_dataset(tmp_path / "dataset")
    task = get_task("text_classification")
    first = evaluation_fingerprint(dataset, EvaluateConfig(), task)
    assert first == evaluation_fingerprint(dataset, EvaluateConfig(batch_size=2), task)
    assert first != evaluation_fingerprint(dataset, EvaluateConfig(max_samples=5), task)
