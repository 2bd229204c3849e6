"""The page at `/` in a real browser: headless Chromium submits a text and shows the summary.

`/?text=...` submits on load; `--virtual-time-budget` lets Chromium wait for the fetch to
finish before it dumps the DOM or takes the screenshot.
"""

from __future__ import annotations

import html
import urllib.parse
from pathlib import Path
from typing import Any

from ..chromium import png_pixels, run_chromium
from .servers import Server

TEXT = (
    "Heap queue algorithm (a.k.a. priority queue). Heaps are arrays for which "
    "a[k] <= a[2*k+1] and a[k] <= a[2*k+2] for all k, counting elements from 0."
)
#: Lets Chromium wait for the page's fetch before it dumps the DOM or takes the screenshot.
VIRTUAL_TIME = "--virtual-time-budget=20000"
#: The summary box's background colour (#fff3c4 in page.py).
SUMMARY_BACKGROUND = (0xFF, 0xF3, 0xC4)


def test_nothing_asked_yet_shows_no_summary_box_in_chromium(server: Server, tmp_path: Path) -> None:
    shot = tmp_path / "idle.png"
    run_chromium("--window-size=1000,800", f"--screenshot={shot}", server.url + "/", work=tmp_path)
    _, _, pixels = png_pixels(shot)
    assert not any(SUMMARY_BACKGROUND in row for row in pixels), "an empty summary box is drawn"


def test_page_summarizes_pasted_text_in_chromium(
    server: Server, reference: Any, tmp_path: Path
) -> None:
    url = f"{server.url}/?text={urllib.parse.quote(TEXT)}"
    expected = reference([TEXT])[0]

    dom = run_chromium(VIRTUAL_TIME, "--dump-dom", url, work=tmp_path, timeout=90)
    assert '<body data-state="done">' in dom, dom[-2000:]
    assert f'<div id="summary">{html.escape(expected, quote=False)}</div>' in dom

    shot = tmp_path / "page.png"
    run_chromium(
        VIRTUAL_TIME,
        "--window-size=1000,800",
        f"--screenshot={shot}",
        url,
        work=tmp_path,
        timeout=90,
    )
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1000, 800)
    # The summary box is drawn, with text (dark pixels) inside it: not a blank page.
    box = [
        (x, y) for y, row in enumerate(pixels) for x, p in enumerate(row) if p == SUMMARY_BACKGROUND
    ]
    assert len(box) > 10_000, "no summary box on the screenshot"
    left, right = min(x for x, _ in box), max(x for x, _ in box)
    top, bottom = min(y for _, y in box), max(y for _, y in box)
    dark = sum(
        1
        for row in pixels[top : bottom + 1]
        for r, g, b in row[left : right + 1]
        if r + g + b < 200
    )
    # A tiny model's summary can be a few characters (". a." here): expect ink for each.
    assert dark > min(50, 5 * len(expected.replace(" ", ""))), "the summary box is empty"
