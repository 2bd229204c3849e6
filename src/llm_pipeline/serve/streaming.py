"""Streaming a chat answer as it is written: server-sent events on the predict route.

A request with `"parameters": {"stream": true}` (one instance, a chat task's) is answered
`text/event-stream` instead of JSON, the way Vertex AI's `streamRawPredict` carries a
container's stream to its caller: `data: {"text": "..."}` events with the text added since
the last one, then one `data: {"predictions": ["<the whole answer>"]}` event, the same
`predictions` a plain request gets (or `data: {"error": "..."}`), and the stream ends.

The model's worker thread reports each row's text so far at every decoding step
(`models.completion.complete`'s and the CTranslate2 engine's `on_text`); `TextSink` turns
that into deltas on the event loop. A delta never shows what the final answer will not
hold: text that could be the start of a stop string is held back until the next tokens
tell, and the final event is the answer as the endpoint returns it, cut where it ends.
A client that hangs up abandons its row (`Batcher.abandon`): the call ends within a step
once none of its rows is wanted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

#: The media type of the streamed answer.
EVENT_STREAM = "text/event-stream"


class TextSink:
    """One streamed answer's deltas, pushed by the model's thread, read on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stop: Sequence[str] = ()) -> None:
        self._loop = loop
        self._stop = tuple(s for s in stop if s)
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self._sent = ""

    def push(self, text: str) -> None:
        """The row's whole text so far (from the model's thread): queue what is new of it."""
        shown = self._safe(text)
        if shown.startswith(self._sent) and len(shown) > len(self._sent):
            delta, self._sent = shown[len(self._sent) :], shown
            self._loop.call_soon_threadsafe(self.queue.put_nowait, delta)

    def _safe(self, text: str) -> str:
        """`text` up to a stop string it holds, less an ending that may begin one."""
        cut = [index for index in (text.find(stop) for stop in self._stop) if index >= 0]
        if cut:
            return text[: min(cut)]
        held = 0
        for stop in self._stop:
            for size in range(min(len(stop) - 1, len(text)), held, -1):
                if text.endswith(stop[:size]):
                    held = size
                    break
        return text[: len(text) - held] if held else text


@dataclass(frozen=True)
class StreamedInput:
    """A model input whose answer streams to `sink` as it is written."""

    prompt: str
    sink: TextSink


def event(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying `payload` as JSON."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


async def events(
    sink: TextSink, answer: Future[Any], gone: asyncio.Future[Any]
) -> AsyncIterator[bytes]:
    """The stream of one answer: its deltas while it is written, then the whole of it (or
    the error that ended it); it ends early once `gone` (the client left)."""
    waiting = asyncio.wrap_future(answer)
    while True:
        getter = asyncio.ensure_future(sink.queue.get())
        done, _ = await asyncio.wait([getter, waiting, gone], return_when=asyncio.FIRST_COMPLETED)
        if gone in done:
            getter.cancel()
            return
        if getter in done:
            yield event({"text": getter.result()})
            continue
        getter.cancel()
        break
    while not sink.queue.empty():
        yield event({"text": sink.queue.get_nowait()})
    try:
        prediction = waiting.result()
    except Exception as exc:  # the model's error, as a plain request's 500 would say it
        yield event({"error": f"internal error: {type(exc).__name__}: {exc}"})
        return
    yield event({"predictions": [prediction]})
