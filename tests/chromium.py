"""Headless Chromium for the tests of pages: a screenshot and the DOM it built, or a page
driven as a person drives it (clicks and keystrokes) over the DevTools protocol."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class DevTools:
    """A headless Chromium page driven over the DevTools protocol, on the pipe Chromium
    opens with `--remote-debugging-pipe` (fds 3 and 4; JSON messages ended by NUL): no port
    and no websocket library. Input goes through `Input.dispatch*Event`, as a person's
    mouse and keyboard would."""

    def __init__(self, commands: int, replies: int, timeout_s: float) -> None:
        self._commands, self._replies, self._timeout_s = commands, replies, timeout_s
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None

    def attach(self) -> None:
        """Talk to the page Chromium opened at start from now on."""
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(target for target in targets if target["type"] == "page")
        attached = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)
        self._session = attached["sessionId"]

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events in between are skipped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self._timeout_s
        while True:
            while b"\0" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                    raise TimeoutError(f"chromium did not answer {method} in {self._timeout_s} s")
                chunk = os.read(self._replies, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"chromium closed its pipe during {method}")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(line)
            if reply.get("id") == self._next_id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                result: dict[str, Any] = reply.get("result", {})
                return result

    def open(self, url: str) -> None:
        """Load `url` and wait until it has loaded."""
        self.call("Page.navigate", url=url)
        self.wait_until(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'",
            what=f"{url} to load",
        )

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_until(self, expression: str, *, timeout_s: float = 60, what: str = "") -> Any:
        """Poll `expression` until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        failure = ""
        while True:
            # A page mid-navigation has no document.body yet: an expression that throws
            # is "not yet", and its error is reported only if it never comes right.
            result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
            if "exceptionDetails" in result:
                failure = result["exceptionDetails"].get("exception", {}).get("description", "")
            elif value := result["result"].get("value"):
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"timed out after {timeout_s} s waiting for {what or expression}"
                    + (f" (last error: {failure})" if failure else "")
                )
            time.sleep(0.1)

    def click(self, selector: str) -> None:
        """A left click in the middle of the element `selector` finds."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
            ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent",
                type=kind,
                x=box[0],
                y=box[1],
                button="left",
                clickCount=1,
            )

    def type(self, text: str) -> None:
        """Type `text` key by key into whatever has the focus."""
        for char in text:
            self.call("Input.dispatchKeyEvent", type="keyDown", key=char, text=char)
            self.call("Input.dispatchKeyEvent", type="keyUp", key=char)

    def press_enter(self) -> None:
        """Press and release the Enter key."""
        keys = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
        self.call("Input.dispatchKeyEvent", type="keyDown", text="\r", **keys)
        self.call("Input.dispatchKeyEvent", type="keyUp", **keys)

    def screenshot(self, path: Path) -> Path:
        """Save what the page shows now as a PNG."""
        shot = self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextlib.contextmanager
def devtools(*, work: Path, size: str = "1000,800", timeout_s: float = 60) -> Iterator[DevTools]:
    """Headless Chromium with an empty page, driven over the DevTools pipe; skips where
    Chromium is not installed. It is closed (killed if it hangs) when the block ends."""
    binary = chromium_path()
    to_chromium, from_us = os.pipe()
    to_us, from_chromium = os.pipe()
    # Above 9, so that bash's `3<&N 4>&M` cannot clash with 3 and 4 themselves.
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chromium, from_chromium)]
    for fd in (to_chromium, from_chromium):
        os.close(fd)
    command = [binary, *CHROMIUM_FLAGS, "--remote-debugging-pipe", f"--window-size={size}"]
    command += [f"--user-data-dir={work / 'chromium-profile'}", "about:blank"]
    process = subprocess.Popen(
        ["bash", "-c", f'exec "$@" 3<&{high[0]} 4>&{high[1]}', "bash", *command],
        pass_fds=high,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=work,
    )
    for fd in high:
        os.close(fd)
    browser = DevTools(from_us, to_us, timeout_s)
    try:
        browser.attach()
        # The page's viewport exactly `size` (a headless window's is smaller by its frame).
        width, height = (int(n) for n in size.split(","))
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        yield browser
    finally:
        with contextlib.suppress(Exception):
            browser._session = None
            browser.call("Browser.close")
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(from_us)
        os.close(to_us)


def png_colours(path: Path) -> set[bytes]:
    """The distinct colours of every 7th pixel of a screenshot (enough to find any drawn area)."""
    colours = set[bytes]()
    for bpp, line in png_scanlines(path):
        colours.update(bytes(line[x : x + 3]) for x in range(0, len(line), bpp * 7))
    return colours


def png_pixels(path: Path) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    """(width, height, rows of RGB pixels) of a screenshot."""
    rows = [
        list(zip(line[0::bpp], line[1::bpp], line[2::bpp], strict=True))
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
    """Undo one scanline's PNG filter in place (filters 0-4 of the PNG specification).

    Up and Sub, most of a screenshot's rows, are sums modulo 256 (Sub's a running one per
    channel) done by numpy; Average and Paeth depend on the byte just undone, one by one."""
    import numpy as np

    if kind == 0:
        return
    if kind in (1, 2):
        values = np.frombuffer(line, dtype=np.uint8).astype(np.int64)
        if kind == 2:
            values += np.frombuffer(previous, dtype=np.uint8)
        else:
            values = values.reshape(-1, bpp).cumsum(axis=0).reshape(-1)
        line[:] = (values & 0xFF).astype(np.uint8).tobytes()
        return
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
