"""Every task is evaluated through one path: its scorer (`Task.scorer()`) scores fixed
outputs, and `evaluation.scoring.score_and_write` writes the same files and the same page
frame for each (the facts, the warning, the one scores table, then the task's sections)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation.examples import EvaluationExamples
from llm_pipeline.evaluation.report import PIPELINE_VIEW, ScoreRow, scores_table
from llm_pipeline.evaluation.scoring import BASE_MODEL, ModelOutputs, score_and_write
from llm_pipeline.models.generation import Generated
from llm_pipeline.output_files import EVALUATION_REPORT_FILE, METRICS_FILE, PREDICTIONS_FILE
from llm_pipeline.tasks import TASKS, get_task
from llm_pipeline.tasks.preference_tuning.scoring import PreferenceExamples, PreferenceOutputs
from llm_pipeline.tasks.text_classification.examples import ClassifierExamples
from llm_pipeline.tasks.text_classification.labels import LabelSet

DOCUMENTS = [
    "The cat sat on the mat. It slept all day.",
    "Rain fell on the town. The river rose.",
    "A band played a song. The crowd sang along.",
]
REFERENCES = ["the cat slept", "the river rose", "the crowd sang"]


def _text(task: str) -> tuple[Any, Any, Any]:
    examples = EvaluationExamples("test", DOCUMENTS, REFERENCES, [[1, 2]] * 3)
    model = ModelOutputs(Generated(["the cat slept", "rain fell", "a song"], [3, 2, 2]))
    base = ModelOutputs(Generated(["a cat", "a cat", "a cat"], [2, 2, 2]))
    if task == "instruction_tuning":  # with the response losses a perplexity is taken on
        model = ModelOutputs(model.generated, [(1.0, 2), (2.0, 2), (0.5, 1)])
        base = ModelOutputs(base.generated, [(3.0, 2), (4.0, 2), (2.0, 1)])
    return examples, model, base


def _labels(task: str) -> tuple[Any, Any, Any]:
    labels = LabelSet(names=("sports", "weather"), train_counts={"sports": 5, "weather": 2})
    examples = ClassifierExamples(
        split="test",
        texts=["goal", "rain", "match"],
        text_pairs=None,
        input_ids=[[1, 2]] * 3,
        token_type_ids=None,
        references=np.array([0, 1, 0]),
        labels=labels,
        train_counts=dict(labels.train_counts or {}),
    )
    model = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6]])
    return examples, model, np.full((3, 2), 0.5)


def _pairs(task: str) -> tuple[Any, Any, Any]:
    examples = PreferenceExamples(
        split="test",
        prompts=DOCUMENTS,
        chosen=REFERENCES,
        rejected=["a dog", "a dog", "a dog"],
        input_ids=[[1, 2]] * 3,
        pairs=[{}] * 3,  # the token columns only the model reads
    )
    # Each pair's (chosen, rejected) summed log-probabilities, then the completions.
    model = PreferenceOutputs(
        np.array([[-1.0, -3.0], [-2.0, -2.5], [-4.0, -1.0]]),
        Generated(["the cat slept", "rain fell", "a song"], [3, 2, 2]),
    )
    base = PreferenceOutputs(np.full((3, 2), -2.0), Generated(["a cat"] * 3, [2, 2, 2]))
    return examples, model, base


FIXED = {
    "summarization": _text,
    "instruction_tuning": _text,
    "text_classification": _labels,
    "preference_tuning": _pairs,
}


def test_every_task_has_fixed_outputs_here() -> None:
    assert set(FIXED) == set(TASKS)


@pytest.mark.parametrize("name", sorted(FIXED))
def test_each_task_is_written_through_the_one_path(name: str, tmp_path: Path) -> None:
    task = get_task(name)
    scorer = task.scorer()
    examples, outputs, base = FIXED[name](name)
    metrics = score_and_write(
        scorer=scorer,
        examples=examples,
        outputs=outputs,
        config=EvaluateConfig(bootstrap_samples=20, lead_k=1),
        output_dir=tmp_path / "out",
        started=0.0,
        run_seconds=0.5,
        base=base,
    )
    # The task's metrics, then the sample count and the timings, then the baselines'.
    assert set(task.metric_names) <= set(metrics)
    names = list(metrics)
    assert names.index("samples") > max(names.index(m) for m in task.metric_names)
    assert names[names.index("samples") + 1 : names.index("samples") + 3] == [
        "seconds",
        scorer.run_seconds,
    ]
    assert metrics["samples"] == 3.0 and metrics[scorer.run_seconds] == 0.5
    assert all(f"base_{m}" in metrics for m in task.metric_names)
    folder = tmp_path / "out"
    rows = [json.loads(line) for line in (folder / PREDICTIONS_FILE).read_text().splitlines()]
    assert [row["index"] for row in rows] == [0, 1, 2]
    assert all(row[task.source_label] for row in rows)
    assert json.loads((folder / METRICS_FILE).read_text()) == metrics
    page = (folder / EVALUATION_REPORT_FILE).read_text(encoding="utf-8")
    # One frame: title, facts (split and samples first, seconds last), the pipeline's view,
    # the scores table with the model before fine-tuning beside it, then the task's sections.
    assert f"<h1>{task.report_title}</h1>" in page
    facts = re.findall(r"<span><b>([^<]+):</b>", page)
    assert facts[:2] == ["split", "samples"] and facts[-1] == "seconds"
    assert page.index(PIPELINE_VIEW) < page.index('<table id="scores">')
    table = page[page.index('<table id="scores">') : page.index("</table>")]
    assert f"<th>{BASE_MODEL}</th><th>model − {BASE_MODEL}</th>" in table
    assert all(f"<td>{m}</td>" in table for m in task.metric_names)
    assert page.count('<table id="scores">') == 1
    assert "<h2>" in page[page.index("</table>") :]  # the task's own sections follow


def test_the_scores_table_shows_intervals_only_where_drawn_and_blanks_a_missing_baseline() -> None:
    rows = [
        ScoreRow("f1", 0.5, (0.4, 0.6), {"floor": (0.25, (0.2, 0.3))}, digits=3),
        ScoreRow("perplexity", 2.0, None, {}, higher_is_better=False),
    ]
    table = scores_table(rows, ["floor"], confidence=0.95, note="what the numbers are")
    assert "<th>model <span class='ci'>[95% interval]</span></th>" in table
    assert (
        '<td>f1</td><td>0.500 <span class="ci">[0.400, 0.600]</span></td>'
        '<td>0.250 <span class="ci">[0.200, 0.300]</span></td><td class="up">+0.250</td>'
    ) in table
    assert "<td>perplexity</td><td>2.00</td><td></td><td></td>" in table
    assert table.endswith('<p class="ci">what the numbers are</p>')
