"""Malformed chats and out-of-range parameters get a 400 naming the instance, the turn or the
parameter, from the instruction-tuning server (conftest.py's `chat_server`), which keeps
answering afterwards."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .servers import HEALTH, Server

USER = {"role": "user", "content": "What does the heapq module do?"}
GOOD = {"messages": [USER]}
ANSWER = {"role": "assistant", "content": "It keeps a heap."}


def chat(*turns: Any) -> dict[str, Any]:
    return {"instances": [GOOD, {"messages": list(turns)}]}


def asking(**parameters: Any) -> dict[str, Any]:
    return {"instances": [GOOD], "parameters": parameters}


BAD_CHATS = [
    # (id, body, message part)
    (
        "messages not a list",
        {"instances": [{"messages": "hi"}]},
        "instances[0].messages: not a list of turns (got str)",
    ),
    ("messages empty", chat(), "instances[1].messages: no turns"),
    (
        "turn not an object",
        chat(USER, "hi", USER),
        "instances[1].messages: turn 2 of 3: not an object with `role` and `content`",
    ),
    (
        "unknown role",
        chat(USER, ANSWER, {"role": "bot", "content": "hi"}),
        "instances[1].messages: turn 3 of 3: unknown role 'bot' (roles: system, user, assistant)",
    ),
    (
        "no role",
        chat({"content": "hi"}),
        "instances[1].messages: turn 1 of 1: not an object with `role` and `content`",
    ),
    (
        "turn without text",
        chat(USER, ANSWER, {"role": "user"}),
        "instances[1].messages: turn 3 of 3: not an object with `role` and `content`",
    ),
    (
        "blank text",
        chat(USER, ANSWER, {"role": "user", "content": "  "}),
        "instances[1].messages: turn 3 of 3: no text",
    ),
    (
        "text not a string",
        chat({"role": "user", "content": ["hi"]}),
        "instances[1].messages: turn 1 of 1: content is not text (got list)",
    ),
    (
        "answer before a question",
        chat(ANSWER, USER),
        "instances[1].messages: turn 1 of 2: an assistant turn with no system or user turn "
        "before it",
    ),
    (
        "ends with the assistant",
        chat(USER, ANSWER),
        "instances[1].messages: turn 2 of 2: the chat ends with the assistant's turn; it must end "
        "with the user's",
    ),
    ("empty prompt", {"instances": ["ok", " "]}, "instances[1]: prompt is empty"),
    ("instance a number", {"instances": [3]}, "instances[0]: expected a prompt (string)"),
    ("no messages key", {"instances": [{"text": "hi"}]}, "instances[0]: unknown key 'text'"),
    (
        "chat too long",
        chat(
            {"role": "user", "content": "x" * 1500}, ANSWER, {"role": "user", "content": "y" * 600}
        ),
        "instances[1]: text is 2116 characters; the limit is 2000",
    ),
]
BAD_PARAMETERS = [
    (
        "max_new_tokens 0",
        asking(max_new_tokens=0),
        "parameters.max_new_tokens: must be >= 1, got 0",
    ),
    (
        "max_new_tokens over the cap",
        asking(max_new_tokens=33),
        "parameters: max_new_tokens is 33; this server's limit is 32",
    ),
    (
        "temperature negative",
        asking(temperature=-0.5),
        "parameters.temperature: must be >= 0.0, got -0.5",
    ),
    (
        "temperature over the cap",
        asking(temperature=1.6),
        "parameters: temperature is 1.6; this server's limit is 1.5",
    ),
    (
        "temperature a string",
        asking(temperature="hot"),
        "parameters.temperature: must be a number, got 'hot'",
    ),
    ("top_p 0", asking(temperature=1, top_p=0), "parameters.top_p: must be > 0.0, got 0"),
    (
        "top_p over 1",
        asking(temperature=1, top_p=1.5),
        "parameters.top_p: must be <= 1.0, got 1.5",
    ),
    (
        "top_p without sampling",
        asking(top_p=0.9),
        "parameters: top_p (0.9) applies only when sampling",
    ),
    (
        "stop a number",
        asking(stop=3),
        "parameters.stop: expected a string or a list of strings, got integer",
    ),
    ("stop empty", asking(stop=["a", ""]), "parameters.stop: stop strings must not be empty"),
    (
        "too many stops",
        asking(stop=["a", "b", "c"]),
        "parameters.stop: 3 stop strings; this server's limit is 2",
    ),
    (
        "stop too long",
        asking(stop="z" * 33),
        "parameters.stop: a stop string is 33 characters; this server's limit is 32",
    ),
    (
        "a summarization parameter",
        asking(num_beams=2),
        "parameters.num_beams: not a parameter of task 'instruction_tuning' (it takes "
        "max_new_tokens, temperature, top_p, stop, stream)",
    ),
    (
        "unknown parameter",
        asking(beam_width=2),
        "parameters.beam_width: unknown key (keys allowed in parameters: max_new_tokens, "
        "temperature",
    ),
]


@pytest.mark.parametrize(
    ("body", "message"),
    [case[1:] for case in BAD_CHATS + BAD_PARAMETERS],
    ids=[case[0] for case in BAD_CHATS + BAD_PARAMETERS],
)
def test_bad_chats_and_parameters_get_400_naming_where(
    chat_server: Server, body: dict[str, Any], message: str
) -> None:
    response = chat_server.post(body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error, error
    assert httpx.get(chat_server.url + HEALTH).status_code == 200
