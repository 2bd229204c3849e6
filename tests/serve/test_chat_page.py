"""The chat page at `/` of the instruction-tuning server, in a real browser driven as a
person drives it: headless Chromium clicks into the boxes, types key by key, sends with the
button and then with Enter, and the model's answers appear under the turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from ..chromium import devtools, png_pixels
from .servers import PREDICT, Server

SYSTEM = "Answer in one short sentence."
FIRST = "What does the heapq module do?"
SECOND = "And the bisect module?"
#: The answer boxes' background (#fff3c4) and the user's turns' (#dbe8fb), in page.py.
ANSWER_BACKGROUND = (0xFF, 0xF3, 0xC4)
USER_BACKGROUND = (0xDB, 0xE8, 0xFB)
TURNS = (
    "[...document.querySelectorAll('#turns .turn')]"
    ".map((t) => [t.className, t.querySelector('.content').textContent])"
)


def test_chat_page_sends_typed_messages_and_shows_the_answers_in_chromium(
    chat_server: Server, completions: Any, tmp_path: Path
) -> None:
    system = {"role": "system", "content": SYSTEM}
    first = {"role": "user", "content": FIRST}
    first_answer = completions([{"messages": [system, first]}], max_new_tokens=6)[0]
    answered = {"role": "assistant", "content": first_answer}
    second = {"role": "user", "content": SECOND}
    second_answer = completions(
        [{"messages": [system, first, answered, second]}], max_new_tokens=6
    )[0]
    assert first_answer and second_answer and first_answer != second_answer

    with devtools(work=tmp_path) as page:
        page.open(chat_server.url + "/")
        assert page.evaluate("document.title") == "Chat"
        page.click("#system")
        page.type(SYSTEM)
        page.click("#max_new_tokens")
        page.type("6")
        page.click("#message")
        page.type(FIRST)
        page.click("#go")
        page.wait_until("document.body.dataset.state !== 'working'", what="the first answer")
        status = page.evaluate("document.getElementById('status').textContent")
        assert page.evaluate("document.body.dataset.state") == "done", status
        assert page.evaluate(TURNS) == [["turn user", FIRST], ["turn assistant", first_answer]]
        assert page.evaluate("document.getElementById('message').value") == ""

        # The second message goes with Enter, and the conversation so far with it.
        page.click("#message")
        page.type(SECOND)
        page.press_enter()
        page.wait_until(
            "document.querySelectorAll('#turns .turn').length === 4 "
            "&& document.body.dataset.state === 'done'",
            what="the second answer",
        )
        assert page.evaluate(TURNS)[2:] == [
            ["turn user", SECOND],
            ["turn assistant", second_answer],
        ]
        shot = page.screenshot(tmp_path / "chat.png")

    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1000, 800)
    # Two answer boxes are drawn, each with text (dark pixels) inside: not a blank page.
    rows = [y for y, row in enumerate(pixels) if row.count(ANSWER_BACKGROUND) > 200]
    boxes = [[rows[0]]]
    for y in rows[1:]:
        if y == boxes[-1][-1] + 1:
            boxes[-1].append(y)
        else:
            boxes.append([y])
    assert len(boxes) == 2, f"{len(boxes)} answer boxes on the screenshot"
    for box in boxes:
        ink = sum(1 for y in box for r, g, b in pixels[y] if r + g + b < 200)
        assert ink > 50, "an answer box is empty"
    assert sum(row.count(USER_BACKGROUND) for row in pixels) > 10_000, "no user turns drawn"


def test_chat_page_is_self_contained_and_offers_the_sampling_settings(
    chat_server: Server,
) -> None:
    page = httpx.get(chat_server.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert json.dumps(PREDICT) in page.text  # the page calls this server's predict route
    assert "http://" not in page.text and "https://" not in page.text
    for name in ("system", "message", "max_new_tokens", "temperature", "top_p"):
        assert f'id="{name}"' in page.text
    # The server's limits bound the settings (CHAT_LIMITS: temperature at most 1.5).
    assert 'id="temperature" min="0" step="0.1" max="1.5"' in page.text
    assert 'id="num_beams"' not in page.text
