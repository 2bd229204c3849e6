"""The HTML report: what a reader sees, safe from the text it shows, drawn by a real browser."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.evaluation import compute_rouge, lead_k
from llm_pipeline.evaluation.report import EXAMPLES_EACH, render_report

from . import generate_fixtures as fixtures

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def report_inputs() -> dict[str, Any]:
    """60 real dialogues; lead-3 of the dialogue as the "model", the first line as baseline."""
    rows = fixtures.read_dialogsum("validation", 60)
    documents = [row["dialogue"] for row in rows]
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
    return render_report(
        **report_inputs, baseline_name="lead-1", facts={"split": "validation", "model": "<m>"}
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


def _png_colours(path: Path) -> set[bytes]:
    """The distinct pixel colours of an 8-bit RGB/RGBA PNG, decoded with zlib alone."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        chunk = data[pos + 8 : pos + 8 + length]
        header = chunk if kind == b"IHDR" else header
        idat += chunk if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    previous, colours = bytearray(stride), set[bytes]()
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = previous[x], previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        colours.update(bytes(line[x : x + 3]) for x in range(0, stride, bpp * 7))
        previous = line
    return colours


def test_renders_in_headless_chromium(page: str, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does)")
    html_file = tmp_path / "report.html"
    html_file.write_text(page, encoding="utf-8")
    screenshot = tmp_path / "report.png"
    base = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    shot = subprocess.run(
        [*base, f"--screenshot={screenshot}", "--window-size=1200,900", html_file.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shot.returncode == 0, shot.stderr[-3000:]
    assert len(_png_colours(screenshot)) > 1, "the screenshot is blank"

    dom = subprocess.run(
        [*base, "--dump-dom", html_file.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-3000:]
    assert '<table id="scores">' in dom.stdout
    assert "rougeLsum" in dom.stdout and "<svg" in dom.stdout
