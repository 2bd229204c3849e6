"""The server for instruction tuning: prompts and chats in, completions out.

They share one server (conftest.py's `chat_server`) on a tiny random causal LM, its task set
as the deploy step sets it. Every greedy answer must be the one the model gives the same
chat alone (`completions`), however the server batched it.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx

from .servers import PREDICT, Server

SYSTEM = {"role": "system", "content": "Answer in one short sentence."}
CHATS: list[Any] = [
    "What does the heapq module do?",
    {"messages": [{"role": "user", "content": "What does the bisect module do?"}]},
    {"messages": [SYSTEM, {"role": "user", "content": "What is a context manager?"}]},
    {
        "messages": [
            {"role": "user", "content": "Name a sorting algorithm."},
            {"role": "assistant", "content": "Timsort."},
            {"role": "user", "content": "Who wrote it?"},
        ]
    },
]
CLIENTS = 16


def test_a_prompt_and_chats_get_their_completions(chat_server: Server, completions: Any) -> None:
    response = chat_server.post({"instances": CHATS})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert predictions == completions(CHATS)
    assert all(isinstance(text, str) and text for text in predictions)
    assert len(set(predictions)) == len(CHATS), "the completions do not depend on the chat"
    assert chat_server.stats()["model"]["task"] == "instruction_tuning"


def test_concurrent_clients_with_different_parameters_each_get_their_own_answer(
    chat_server: Server, completions: Any
) -> None:
    prompts = [f"What does module number {i} of the standard library do?" for i in range(CLIENTS)]
    greedy = completions(prompts)
    # A stop string each client's greedy answer holds: its second word.
    stops = [text.split()[1] for text in greedy]
    # Every fourth client stops early; every fourth other one asks for fewer tokens. Neither
    # may share a generate call with the plain greedy requests.
    asks: list[dict[str, Any]] = [
        {"stop": stops[i]} if i % 4 == 1 else {"max_new_tokens": 3} if i % 4 == 2 else {}
        for i in range(CLIENTS)
    ]
    expected = [
        completions([prompt], **{**ask, "stop": (ask["stop"],)} if "stop" in ask else ask)[0]
        for prompt, ask in zip(prompts, asks, strict=True)
    ]
    for i in range(1, CLIENTS, 4):  # the stop string cut the answer before it
        assert expected[i] == greedy[i][: greedy[i].index(stops[i])]

    before = chat_server.stats()
    start = threading.Barrier(CLIENTS)
    answers: list[Any] = [None] * CLIENTS

    def client(i: int) -> None:
        body: dict[str, Any] = {"instances": [prompts[i]], "parameters": asks[i]}
        with httpx.Client(timeout=120) as http:
            start.wait()
            answers[i] = http.post(chat_server.url + PREDICT, json=body)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [a.status_code for a in answers] == [200] * CLIENTS, [a.text for a in answers]
    assert [a.json()["predictions"] for a in answers] == [[text] for text in expected]
    after = chat_server.stats()
    calls = after["model_calls"] - before["model_calls"]
    assert after["instances_run"] - before["instances_run"] == CLIENTS
    assert calls < CLIENTS // 2, f"{calls} generate calls for {CLIENTS} requests: no batching"


def test_sampling_follows_temperature_and_top_p(chat_server: Server, completions: Any) -> None:
    prompts = ["Tell me about the os module.", "Tell me about the re module."]
    greedy = completions(prompts)
    sampled = chat_server.post(
        {"instances": prompts, "parameters": {"temperature": 1.5, "top_p": 1.0}}
    )
    assert sampled.status_code == 200, sampled.text
    # A random model's next-token distribution is nearly flat: sampling strays from greedy.
    assert sampled.json()["predictions"] != greedy
    again = chat_server.post({"instances": prompts, "parameters": {"temperature": 0}})
    assert again.json()["predictions"] == greedy  # temperature 0 is greedy
