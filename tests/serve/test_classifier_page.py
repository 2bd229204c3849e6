"""The labels page at `/` of a classifier's server, in a real browser driven as a person
drives it: headless Chromium types a question and a passage, presses Classify, and every
label's score is drawn as a bar, highest first, each as long as its score."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from llm_pipeline.serve.page import render_page
from llm_pipeline.serve.settings import Settings

from ..chromium import devtools, png_pixels
from .servers import PREDICT, Server
from .tiny_model import CLASSIFIER_LABELS

QUESTION = "How do I read a gzip file line by line?"
PASSAGE = "gzip.open returns a file object; iterate over it."
#: The bars' colour (#26a269) and their tracks' (#e6e6e6), in page.py.
BAR = (0x26, 0xA2, 0x69)
TRACK = (0xE6, 0xE6, 0xE6)
ROWS = (
    "[...document.querySelectorAll('#labels .score-row')].map((row) => [row.className, "
    "row.querySelector('.name').textContent, row.querySelector('.value').textContent])"
)


def test_labels_page_draws_every_labels_score_as_a_bar_in_chromium(
    classifier_server: Server, tmp_path: Path
) -> None:
    asked = {"instances": [{"text": QUESTION, "text_pair": PASSAGE}], "parameters": {"top_k": 3}}
    expected = classifier_server.post(asked).json()["predictions"][0]
    scores = [one["score"] for one in expected]
    assert len(expected) == len(CLASSIFIER_LABELS) and scores == sorted(scores, reverse=True)

    with devtools(work=tmp_path) as page:
        page.open(classifier_server.url + "/")
        assert page.evaluate("document.title") == "Classify"
        page.click("#text")
        page.type(QUESTION)
        page.click("#text_pair")
        page.type(PASSAGE)
        page.click("#go")
        page.wait_until(
            "['done', 'error'].includes(document.body.dataset.state)", what="the labels"
        )
        status = page.evaluate("document.getElementById('status').textContent")
        assert page.evaluate("document.body.dataset.state") == "done", status
        rows = page.evaluate(ROWS)
        shot = page.screenshot(tmp_path / "labels.png")

    # Every label, highest first, the prediction (the first) in bold.
    assert rows == [
        ["score-row" + (" chosen" if rank == 0 else ""), one["label"], f"{100 * one['score']:.1f}%"]
        for rank, one in enumerate(expected)
    ]
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1000, 800)
    # The bars on the screenshot: runs of rows holding the bar colour, top to bottom.
    lines = [y for y, row in enumerate(pixels) if BAR in row]
    bars = [[lines[0]]] if lines else []
    for y in lines[1:]:
        if y == bars[-1][-1] + 1:
            bars[-1].append(y)
        else:
            bars.append([y])
    assert len(bars) == len(expected), f"{len(bars)} bars drawn for {len(expected)} labels"
    for bar, score in zip(bars, scores, strict=True):
        middle = pixels[bar[len(bar) // 2]]
        drawn, track = middle.count(BAR), middle.count(TRACK)
        # Each bar fills its track in proportion to its score (a pixel either way).
        assert abs(drawn - score * (drawn + track)) <= 2, (drawn, track, score)
    lengths = [pixels[bar[len(bar) // 2]].count(BAR) for bar in bars]
    assert lengths == sorted(lengths, reverse=True) and lengths[0] > lengths[-1], lengths


def test_labels_page_is_self_contained_and_asks_for_every_label(
    classifier_server: Server,
) -> None:
    page = httpx.get(classifier_server.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert json.dumps(PREDICT) in page.text
    assert "http://" not in page.text and "https://" not in page.text
    # The loaded model's labels are on the page: it asks for top_k = their number.
    assert json.dumps(list(CLASSIFIER_LABELS)) in page.text
    assert "top_k: MODEL.labels.length" in page.text
    assert 'id="text_pair"' in page.text and 'type="number"' not in page.text


def test_a_model_of_single_texts_gets_no_second_text_box_in_chromium(
    multi_label_server: Server, tmp_path: Path
) -> None:
    with devtools(work=tmp_path) as page:
        page.open(multi_label_server.url + "/")
        assert page.evaluate("document.getElementById('text_pair')") is None
        assert "Second text" not in page.evaluate("document.body.innerText")
        page.click("#text")
        page.type(QUESTION)
        page.click("#go")
        page.wait_until("['done', 'error'].includes(document.body.dataset.state)", what="labels")
        assert page.evaluate("document.body.dataset.state") == "done"
        assert len(page.evaluate(ROWS)) == len(CLASSIFIER_LABELS)


def test_a_labels_page_without_labels_reads_them_from_stats() -> None:
    # Served while the model loads, or behind a token: the page holds no labels.
    loading = render_page(Settings(task="text_classification"), None)
    model = {"labels": ["a", "b"], "multi_label": False, "threshold": None}
    locked = render_page(Settings(task="text_classification", token="t"), model)
    for html in (loading, locked):
        assert "let MODEL = null;" in html and 'fetch("/stats"' in html
        assert "No labels: the model is still loading, or the token is wrong." in html
    assert '"labels": ["a", "b"]' in render_page(Settings(task="text_classification"), model)
