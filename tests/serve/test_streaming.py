"""Streamed chat answers: server-sent events on the predict route, under each engine.

The deltas add up to the answer a plain request gets for the same chat, never show text
past a stop string, and a client that hangs up mid-stream leaves the server serving.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from llm_pipeline.serve.streaming import TextSink

from .servers import PREDICT, Server

CHAT = {"messages": [{"role": "user", "content": "What does the heapq module do?"}]}


def _stream(server: Server, body: dict[str, Any]) -> tuple[httpx.Response, list[dict]]:
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", server.url + PREDICT, json=body) as response,
    ):
        text = "".join(response.iter_text())
    events = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: ")]
    return response, events


def test_a_streamed_answer_adds_up_to_the_plain_one(chat_server: Server) -> None:
    parameters = {"max_new_tokens": 12}
    plain = chat_server.post({"instances": [CHAT], "parameters": parameters})
    answer = plain.json()["predictions"][0]
    response, events = _stream(
        chat_server, {"instances": [CHAT], "parameters": {**parameters, "stream": True}}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    deltas = [event["text"] for event in events if "text" in event]
    assert len(deltas) >= 3, "the answer came in one piece, not as it was written"
    assert "".join(deltas) == answer
    assert events[-1] == {"predictions": [answer]}


def test_a_stream_never_shows_its_stop_string(chat_server: Server) -> None:
    plain = chat_server.post({"instances": [CHAT], "parameters": {"max_new_tokens": 12}})
    words = plain.json()["predictions"][0].split()
    stop = words[2]
    body = {"instances": [CHAT], "parameters": {"max_new_tokens": 12, "stop": stop, "stream": True}}
    _, events = _stream(chat_server, body)
    streamed = "".join(event["text"] for event in events if "text" in event)
    final = events[-1]["predictions"][0]
    assert stop not in streamed and stop not in final
    assert final.startswith(streamed) and final.rstrip() == " ".join(words[:2])


def test_a_stream_is_one_instance_and_a_chat_tasks(chat_server: Server, server: Server) -> None:
    two = chat_server.post({"instances": [CHAT, CHAT], "parameters": {"stream": True}})
    assert two.status_code == 400
    assert two.json()["error"].startswith("parameters.stream: a streamed answer is one instance's")
    summary = server.post({"instances": ["A text."], "parameters": {"stream": True}})
    assert summary.status_code == 400 and "stream" in summary.json()["error"]


def test_a_client_that_hangs_up_mid_stream_is_let_go(chat_server: Server) -> None:
    """Whether the model had finished when the server heard of it depends on timing; that
    the stream is no longer counted in flight, and the server answers on, does not. (That a
    call whose clients all left ends within a step: tests/engines, test_batching.)"""
    body = {"instances": [CHAT], "parameters": {"max_new_tokens": 200, "stream": True}}
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", chat_server.url + PREDICT, json=body) as response,
    ):
        next(response.iter_bytes())  # the first event, then hang up
    deadline = time.monotonic() + 10
    while chat_server.stats()["requests_in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert chat_server.stats()["requests_in_flight"] == 0
    assert chat_server.post({"instances": [CHAT]}).status_code == 200


def test_text_that_may_begin_a_stop_string_is_held_back() -> None:
    async def deltas(texts: list[str], stop: tuple[str, ...]) -> list[str]:
        sink = TextSink(asyncio.get_running_loop(), stop)
        for text in texts:
            sink.push(text)
        await asyncio.sleep(0)
        return [sink.queue.get_nowait() for _ in range(sink.queue.qsize())]

    texts = ["The", "The ans", "The answer #", "The answer ##", "The answer ## end"]
    assert asyncio.run(deltas(texts, ("###",))) == ["The", " ans", "wer ", "## end"]
    assert asyncio.run(deltas(texts, ("##",))) == ["The", " ans", "wer "]
    assert asyncio.run(deltas(texts, ())) == ["The", " ans", "wer #", "#", " end"]
