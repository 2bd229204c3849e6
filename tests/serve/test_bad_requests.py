"""Bad requests get a 4xx status and a message saying what is wrong and where, in Vertex's
`{"error": ...}` shape, and the server keeps answering afterwards."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .servers import HEALTH, PREDICT, Server

GOOD = {"instances": ["A short text."]}
JSON = {"Content-Type": "application/json"}
BAD_REQUESTS = [
    # (id, method, route, headers, body, status, message part)
    ("not json", "POST", PREDICT, JSON, b'{"instances": [', 400, "not valid JSON"),
    ("empty body", "POST", PREDICT, JSON, b"", 400, "request body is empty"),
    (
        "NaN",
        "POST",
        PREDICT,
        JSON,
        b'{"instances": ["a"], "parameters": {"length_penalty": NaN}}',
        400,
        "parameters.length_penalty: NaN is not a finite number",
    ),
    (
        "a key twice",  # the last counted, where a proxy in front may have checked the first
        "POST",
        PREDICT,
        JSON,
        b'{"instances": ["a"], "instances": ["b", "c"]}',
        400,
        "duplicate key 'instances' at the top level (given 2 times; only the last would count)",
    ),
    (
        "a number past float",  # json.loads reads it as infinity
        "POST",
        PREDICT,
        JSON,
        b'{"instances": ["a"], "parameters": {"length_penalty": 1e400}}',
        400,
        "parameters.length_penalty: 1e400 is not a finite number",
    ),
    ("body is a list", "POST", PREDICT, JSON, b'["a"]', 400, "must be a JSON object"),
    (
        "lone surrogate",  # valid JSON, but no text: it was a 500 from the tokenizer
        "POST",
        PREDICT,
        JSON,
        b'{"instances": ["a", {"text": "b\\ud800c"}]}',
        400,
        "instances[1].text: holds a lone surrogate \\ud800, which is not Unicode text",
    ),
    (
        "nested past the decoder",  # json.loads raises RecursionError on this
        "POST",
        PREDICT,
        JSON,
        b'{"instances": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        400,
        "request body is not valid JSON: nested deeper than 64 levels",
    ),
    (
        "nested past the limit",
        "POST",
        PREDICT,
        JSON,
        b'{"instances": [' + b'{"text": ' * 70 + b'"a"' + b"}" * 70 + b"]}",
        400,
        "request body is not valid JSON: nested deeper than 64 levels",
    ),
    (
        "no instances",
        "POST",
        PREDICT,
        JSON,
        {"parameters": {}},
        400,
        "instances: required, but not given (a list of texts",
    ),
    ("instances empty", "POST", PREDICT, JSON, {"instances": []}, 400, "instances: empty"),
    (
        "instances a string",
        "POST",
        PREDICT,
        JSON,
        {"instances": "a"},
        400,
        "instances: expected a list",
    ),
    (
        "too many instances",
        "POST",
        PREDICT,
        JSON,
        {"instances": ["a"] * 9},
        400,
        "instances: 9 instances; the limit is 8 per request",
    ),
    (
        "empty text",
        "POST",
        PREDICT,
        JSON,
        {"instances": ["ok", "  "]},
        400,
        "instances[1]: text is empty",
    ),
    (
        "text too long",
        "POST",
        PREDICT,
        JSON,
        {"instances": ["a", "b", "c", "x" * 2500]},
        400,
        "instances[3]: text is 2500 characters; the limit is 2000",
    ),
    (
        "number instance",
        "POST",
        PREDICT,
        JSON,
        {"instances": ["a", 7]},
        400,
        'instances[1]: expected a string or an object {"text": string}, got integer',
    ),
    (
        "list instance",
        "POST",
        PREDICT,
        JSON,
        {"instances": [["a"]]},
        400,
        "instances[0]: expected a string or an object",
    ),
    (
        "text not a string",
        "POST",
        PREDICT,
        JSON,
        {"instances": [{"text": 5}]},
        400,
        "instances[0]: text must be a string, got integer",
    ),
    (
        "object without text",
        "POST",
        PREDICT,
        JSON,
        {"instances": [{"body": "a"}]},
        400,
        "instances[0]: unknown key 'body'",
    ),
    (
        "text with extra key",
        "POST",
        PREDICT,
        JSON,
        {"instances": [{"text": "a", "id": 1}]},
        400,
        "instances[0]: unknown key 'id'; an instance object holds only \"text\"",
    ),
    (
        "unknown top-level key",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "instance": ["a"]},
        400,
        "instance: unknown key; did you mean 'instances'?",
    ),
    (
        "parameters a list",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "parameters": [1]},
        400,
        "parameters: must be an object, got [1]",
    ),
    (
        "unknown parameter",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "parameters": {"temperature": 0.7}},
        400,
        "parameters.temperature: not a parameter of task 'summarization' (it takes max_new_tokens",
    ),
    (
        "num_beams over the cap",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "parameters": {"num_beams": 5}},
        400,
        "parameters: num_beams is 5; this server's limit is 4",
    ),
    (
        "max_new_tokens 0",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "parameters": {"max_new_tokens": 0}},
        400,
        "parameters.max_new_tokens: must be >= 1, got 0",
    ),
    (
        "max_new_tokens over the cap",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "parameters": {"max_new_tokens": 33}},
        400,
        "max_new_tokens is 33",
    ),
    (
        "negative min_new_tokens",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "parameters": {"min_new_tokens": -1}},
        400,
        "parameters.min_new_tokens",
    ),
    (
        "min above max",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "parameters": {"min_new_tokens": 9, "max_new_tokens": 3}},
        400,
        "min_new_tokens (9) is above max_new_tokens (3)",
    ),
    (
        "num_beams a string",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "parameters": {"num_beams": "2"}},
        400,
        "parameters.num_beams: must be an integer, got '2'",
    ),
    (
        "num_beams a float",
        "POST",
        PREDICT,
        JSON,
        {**GOOD, "parameters": {"num_beams": 2.0}},
        400,
        "parameters.num_beams",
    ),
    (
        "form content type",
        "POST",
        PREDICT,
        {"Content-Type": "application/x-www-form-urlencoded"},
        b"instances=a",
        415,
        "Content-Type must be application/json",
    ),
    (
        "no content type",
        "POST",
        PREDICT,
        {},
        b'{"instances": ["a"]}',
        415,
        "Content-Type must be application/json, got none",
    ),
    (
        "declared over 1.5 MB",
        "POST",
        PREDICT,
        JSON,
        {"instances": ["x" * 1_600_000]},
        413,
        "the limit is 1572864 bytes",
    ),
    ("GET on predict", "GET", PREDICT, {}, None, 405, "method not allowed: GET " + PREDICT),
    ("unknown route", "POST", "/predict", JSON, GOOD, 404, "no route POST /predict"),
]


@pytest.mark.parametrize(
    ("method", "route", "headers", "body", "status", "message"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
def test_bad_requests_get_4xx_with_a_message_and_the_server_stays_up(
    server: Server,
    method: str,
    route: str,
    headers: dict[str, str],
    body: Any,
    status: int,
    message: str,
) -> None:
    content = json.dumps(body).encode() if isinstance(body, dict | list) else body
    response = httpx.request(method, server.url + route, headers=headers, content=content)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]
    assert httpx.get(server.url + HEALTH).status_code == 200


def test_body_over_the_limit_is_refused_while_it_is_read(server: Server) -> None:
    # No Content-Length (chunked): the size is counted as the body arrives.
    def chunks() -> Iterator[bytes]:
        yield b'{"instances": ["'
        for _ in range(40):
            yield b"y" * 50_000
        yield b'"]}'

    response = httpx.post(server.url + PREDICT, headers=JSON, content=chunks())
    assert response.status_code == 413
    assert "over 1572864 bytes" in response.json()["error"]
