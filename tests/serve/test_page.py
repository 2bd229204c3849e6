"""The page at `/` in a real browser: headless Chromium submits a text and shows the summary.

`/?text=...` submits on load; `--virtual-time-budget` lets Chromium wait for the fetch to
finish before it dumps the DOM or takes the screenshot.
"""

from __future__ import annotations

import html
import shutil
import struct
import subprocess
import urllib.parse
import zlib
from pathlib import Path
from typing import Any

import pytest

from .servers import Server

TEXT = (
    "Heap queue algorithm (a.k.a. priority queue). Heaps are arrays for which "
    "a[k] <= a[2*k+1] and a[k] <= a[2*k+2] for all k, counting elements from 0."
)
#: The summary box's background colour (#fff3c4 in page.py).
SUMMARY_BACKGROUND = (0xFF, 0xF3, 0xC4)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium on this machine (apt-get install chromium)")


def _run_chromium(*args: str, cwd: Path) -> str:
    command = [
        _chromium(),
        *("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run"),
        *("--disable-dev-shm-usage", f"--user-data-dir={cwd / 'profile'}"),
        "--virtual-time-budget=20000",
        *args,
    ]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_page_summarizes_pasted_text_in_chromium(
    server: Server, reference: Any, tmp_path: Path
) -> None:
    url = f"{server.url}/?text={urllib.parse.quote(TEXT)}"
    expected = reference([TEXT])[0]

    dom = _run_chromium("--dump-dom", url, cwd=tmp_path)
    assert '<body data-state="done">' in dom, dom[-2000:]
    assert f'<div id="summary">{html.escape(expected, quote=False)}</div>' in dom

    shot = tmp_path / "page.png"
    _run_chromium("--window-size=1000,800", f"--screenshot={shot}", url, cwd=tmp_path)
    width, height, pixels = read_png(shot)
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


def read_png(path: Path) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    """(width, height, rows of RGB pixels) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, idat, header = 8, b"", b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        chunk = data[offset + 8 : offset + 8 + length]
        header = chunk if kind == b"IHDR" else header
        idat += chunk if kind == b"IDAT" else b""
        offset += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    stride = width * channels
    raw = zlib.decompress(idat)
    rows: list[list[tuple[int, int, int]]] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(kind, line, previous, channels)
        rows.append([tuple(line[i : i + 3]) for i in range(0, stride, channels)])  # type: ignore[misc]
        previous = line
    return width, height, rows


def _unfilter(kind: int, line: bytearray, previous: bytearray, bpp: int) -> None:
    """Undo one scanline's PNG filter in place (filters 0-4 of the PNG specification)."""
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up = previous[i]
        up_left = previous[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            p = left + up - up_left
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
            predictor = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
            line[i] = (line[i] + predictor) & 0xFF
