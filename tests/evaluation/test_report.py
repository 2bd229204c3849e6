"""The HTML report: what a reader sees, safe from the text it shows, drawn by a real browser."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.config.data import MIN_EVALUATION_ROWS
from llm_pipeline.evaluation import compute_rouge, lead_k
from llm_pipeline.evaluation.report import (
    EXAMPLES_EACH,
    few_rows_warning,
    render_report,
    warn_if_few_rows,
)

from ..chromium import render_in_chromium
from ..docstring_data import DocstringData


@pytest.fixture(scope="module")
def report_inputs(docstring_data: DocstringData) -> dict[str, Any]:
    """60 real documents; their lead-3 as the "model", their first sentence as baseline."""
    rows = docstring_data.rows("validation", 60)
    documents = [row["document"] for row in rows]
    documents[0] += "\n<script>alert('x')</script> & <b>bold</b>"
    references = [row["summary"] for row in rows]
    predictions = [lead_k(document, 3) for document in documents]
    predictions[1] = "<img src=x onerror=alert(1)>"
    firsts = [lead_k(document, 1) for document in documents]
    return {
        "model": compute_rouge(predictions, references, workers=1, n_resamples=100),
        "baseline": compute_rouge(firsts, references, workers=1, n_resamples=100),
        "documents": documents,
        "references": references,
        "predictions": predictions,
    }


@pytest.fixture(scope="module")
def page(report_inputs: dict[str, Any]) -> str:
    inputs = {key: value for key, value in report_inputs.items() if key != "baseline"}
    return render_report(
        **inputs,
        baselines={"lead-1": report_inputs["baseline"]},
        facts={"split": "validation", "model": "<m>"},
    )


def _example_ids(section: str) -> list[int]:
    return [int(i) for i in re.findall(r"<h3>#(\d+) —", section)]


def test_scores_table_shows_model_and_baseline_with_intervals(
    page: str, report_inputs: dict[str, Any]
) -> None:
    table = page[page.index('<table id="scores">') : page.index("</table>")]
    for name, score in report_inputs["model"].scores.items():
        low, high = report_inputs["model"].intervals[name]
        assert f'<td>{name}</td><td>{score:.2f} <span class="ci">[{low:.2f}, {high:.2f}]' in table
    assert "lead-1" in table
    assert f"{report_inputs['baseline'].scores['rouge1']:.2f}" in table


def test_the_note_names_the_resamples_and_claims_none_without_a_bootstrap(
    page: str, report_inputs: dict[str, Any]
) -> None:
    assert "intervals: percentile bootstrap of the mean, 100 resamples." in page
    # evaluate.bootstrap_samples 0: compute_rouge resamples once, which is no interval.
    predictions, references = report_inputs["predictions"], report_inputs["references"]
    bare = render_report(
        model=compute_rouge(predictions, references, workers=1, n_resamples=1),
        documents=report_inputs["documents"],
        references=references,
        predictions=predictions,
    )
    note = bare[bare.index('<p class="ci">') : bare.index("</p>", bare.index('<p class="ci">'))]
    assert "no intervals (evaluate.bootstrap_samples is 0)" in note
    assert "resamples" not in note


def test_each_baseline_gets_its_score_and_difference_columns(
    report_inputs: dict[str, Any],
) -> None:
    model, first = report_inputs["model"], report_inputs["baseline"]
    page = render_report(
        model=model,
        documents=report_inputs["documents"],
        references=report_inputs["references"],
        predictions=report_inputs["predictions"],
        baselines={"lead-1": first, "before fine-tuning": model},
    )
    table = page[page.index('<table id="scores">') : page.index("</table>")]
    assert "<th>lead-1</th><th>model − lead-1</th>" in table
    assert "<th>before fine-tuning</th><th>model − before fine-tuning</th>" in table
    delta = model.scores["rougeLsum"] - first.scores["rougeLsum"]
    assert f"{delta:+.2f}</td>" in table
    assert table.count("+0.00</td>") == 4  # the model against itself, one row per metric


def test_best_and_worst_examples_are_ranked_by_rougelsum(
    page: str, report_inputs: dict[str, Any]
) -> None:
    scores = report_inputs["model"].per_example["rougeLsum"]
    best_part, worst_part = page.split("<h2>Worst ")
    best, worst = _example_ids(best_part), _example_ids(worst_part)
    assert len(best) == len(worst) == EXAMPLES_EACH
    assert not set(best) & set(worst)
    assert [scores[i] for i in best] == sorted(scores, reverse=True)[:EXAMPLES_EACH]
    assert [scores[i] for i in worst] == sorted(scores)[:EXAMPLES_EACH]


def test_all_text_is_escaped_and_long_documents_fold(page: str) -> None:
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;m&gt;" in page
    assert "<details><summary>" in page


def test_page_is_self_contained(page: str) -> None:
    assert "<script" not in page and "<link" not in page and "@import" not in page
    urls = set(re.findall(r"https?://[^\s\"')]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls  # the SVG namespace is not fetched
    assert page.count("<svg") == 1 and page.count("<rect") > 10


def test_small_sets_show_each_example_once(report_inputs: dict[str, Any]) -> None:
    n = 7
    model = compute_rouge(
        report_inputs["predictions"][:n], report_inputs["references"][:n], n_resamples=1
    )
    page = render_report(
        model=model,
        documents=report_inputs["documents"][:n],
        references=report_inputs["references"][:n],
        predictions=report_inputs["predictions"][:n],
    )
    assert sorted(_example_ids(page)) == list(range(n))
    assert "<h2>Best 7 examples" in page and "Worst" not in page
    assert "lead-3" not in page  # no baseline column without a baseline
    assert 'class="ci">[' not in page  # one resample: no interval to show


def test_renders_in_headless_chromium(page: str, tmp_path: Path) -> None:
    html_file = tmp_path / "report.html"
    html_file.write_text(page, encoding="utf-8")
    shown = render_in_chromium(html_file, tmp_path)
    assert len(shown.colours) > 1, "the screenshot is blank"
    assert '<table id="scores">' in shown.dom
    assert "rougeLsum" in shown.dom and "<svg" in shown.dom


def test_fewer_rows_than_a_gate_can_trust_are_warned_of_and_enough_are_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert few_rows_warning(MIN_EVALUATION_ROWS, "test") is None
    warning = warn_if_few_rows(MIN_EVALUATION_ROWS - 1, "validation")
    assert warning is not None
    assert warning.startswith(
        f"evaluated on {MIN_EVALUATION_ROWS - 1} validation row(s), fewer than the "
        f"{MIN_EVALUATION_ROWS} a gate can trust: one row moves a score by up to 3% of its range"
    )
    assert "data.max_samples.validation" in warning  # what to change
    assert capsys.readouterr().out == f"::status:: warning: {warning}\n"
    assert warn_if_few_rows(MIN_EVALUATION_ROWS, "validation") is None
    assert capsys.readouterr().out == ""
