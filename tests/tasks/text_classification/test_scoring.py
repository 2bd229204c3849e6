"""A classifier's evaluation refuses a model of other labels than the dataset's, saying what
differs: the gate's reason quotes it when a new run's label set has changed."""

from types import SimpleNamespace

import numpy as np
import pytest

from llm_pipeline.errors import EvaluationError
from llm_pipeline.tasks.text_classification.examples import ClassifierExamples
from llm_pipeline.tasks.text_classification.labels import LabelSet
from llm_pipeline.tasks.text_classification.scoring import ClassifierScorer
from llm_pipeline.tasks.text_classification.task import TextClassification

SERVED = ("google", "pandas", "torch")


def _examples(names: tuple[str, ...], multi_label: bool = False) -> ClassifierExamples:
    return ClassifierExamples(
        split="test",
        texts=["a"],
        text_pairs=None,
        input_ids=[[1, 2]],
        token_type_ids=None,
        references=np.zeros(1, dtype=np.int64),
        labels=LabelSet(names=names, multi_label=multi_label),
        train_counts={},
    )


def _model(names: tuple[str, ...]) -> SimpleNamespace:
    config = SimpleNamespace(
        id2label=dict(enumerate(names)), problem_type="single_label_classification"
    )
    return SimpleNamespace(config=config)


@pytest.mark.parametrize(
    ("names", "multi_label", "difference"),
    [
        (("google", "numpy", "pandas", "torch"), False, "the dataset adds 'numpy'"),
        (("google", "pandas", "pytorch"), False, "the dataset adds 'pytorch'; it lacks 'torch'"),
        (("google", "pandas"), False, "the dataset lacks 'torch'"),
        (("torch", "pandas", "google"), False, "the same labels in another id order"),
        (SERVED, True, "the dataset is multi-label"),
    ],
    ids=["added", "renamed", "dropped", "reordered", "multi-label"],
)
def test_a_model_of_other_labels_is_refused_saying_what_differs(
    names: tuple[str, ...], multi_label: bool, difference: str
) -> None:
    scorer = ClassifierScorer(TextClassification())
    with pytest.raises(EvaluationError) as caught:
        scorer.check_model(_model(SERVED), _examples(names, multi_label), "served", "data")
    assert str(caught.value).startswith(
        f"model folder served was trained on other labels than dataset data has: {difference} "
        f"(the model's single-label labels {list(SERVED)}, the dataset's"
    )


def test_a_model_of_the_datasets_labels_is_taken() -> None:
    scorer = ClassifierScorer(TextClassification())
    examples = scorer.check_model(_model(SERVED), _examples(SERVED), "served", "data")
    assert examples.labels.names == SERVED
