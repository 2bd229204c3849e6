"""Headless Chromium for the tests of pages: a screenshot and the DOM it built."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

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


@dataclass(frozen=True)
class Rendered:
    """What Chromium made of a page: the screenshot's colours and the DOM after parsing."""

    screenshot: Path
    colours: set[bytes]
    dom: str


def chromium_path() -> str:
    """The Chromium binary; skips the test where none is installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does)")


def run_chromium(*args: str, work: Path, timeout: float = 120) -> str:
    """Run headless Chromium with `args` (a profile of its own under `work`); its stdout."""
    done = subprocess.run(
        [chromium_path(), *CHROMIUM_FLAGS, f"--user-data-dir={work / 'chromium-profile'}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=work,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def render_in_chromium(html_file: Path, work: Path, *, size: str = "1200,900") -> Rendered:
    """Screenshot `html_file` and dump its DOM; skips where Chromium is not installed."""
    screenshot = work / f"{html_file.stem}.png"
    run_chromium(
        f"--screenshot={screenshot}", f"--window-size={size}", html_file.as_uri(), work=work
    )
    dom = run_chromium("--dump-dom", html_file.as_uri(), work=work)
    return Rendered(screenshot, png_colours(screenshot), dom)


def png_colours(path: Path) -> set[bytes]:
    """The distinct colours of every 7th pixel of a screenshot (enough to find any drawn area)."""
    colours = set[bytes]()
    for bpp, line in png_scanlines(path):
        colours.update(bytes(line[x : x + 3]) for x in range(0, len(line), bpp * 7))
    return colours


def png_pixels(path: Path) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    """(width, height, rows of RGB pixels) of a screenshot."""
    rows = [
        [(line[i], line[i + 1], line[i + 2]) for i in range(0, len(line), bpp)]
        for bpp, line in png_scanlines(path)
    ]
    return (len(rows[0]) if rows else 0), len(rows), rows


def png_scanlines(path: Path) -> Iterator[tuple[int, bytearray]]:
    """(bytes per pixel, unfiltered scanline) for each row of an 8-bit,
    non-interlaced RGB or RGBA PNG, decoded with zlib alone (no imaging library needed)."""
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
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(raw[start], line, previous, bpp)
        yield bpp, line
        previous = line


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
