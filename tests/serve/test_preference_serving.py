"""A preference-tuned model is served as instruction tuning's chat model is: chats in, chat
completions out, the same chat page. DPO's output folder is a causal LM like SFT's, so the
tiny causal LM stands for it; the server is told the task as the deploy step tells it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llm_pipeline.serve.schemas import GenerationParameters

from .servers import CHAT_NEW_TOKENS, InProcess, serve_in_thread, wait_for

CHATS: list[Any] = [
    "What does the heapq module do?",
    {
        "messages": [
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "What is a context manager?"},
        ]
    },
]


@pytest.fixture(scope="module")
def dpo_server(causal_lm_dir: Path) -> Iterator[InProcess]:
    with serve_in_thread(
        model_uri=str(causal_lm_dir),
        task="preference_tuning",
        device="cpu",
        parameters=GenerationParameters(max_new_tokens=CHAT_NEW_TOKENS),
    ) as running:
        health = running.url + running.settings.health_route

        def loaded() -> bool:
            assert running.state.error is None, running.state.error
            return httpx.get(health, timeout=5).status_code == 200

        wait_for(loaded, timeout_s=90, what="the preference-tuned model to load")
        yield running


def test_chats_get_the_completions_a_chat_model_gives(
    dpo_server: InProcess, completions: Any
) -> None:
    predict = dpo_server.url + dpo_server.settings.predict_route
    response = httpx.post(predict, json={"instances": CHATS}, timeout=60)
    assert response.status_code == 200, response.text
    # Rendered and completed as instruction tuning's server renders and completes them.
    assert response.json()["predictions"] == completions(CHATS)
    stats = httpx.get(dpo_server.url + "/stats", timeout=10).json()
    assert stats["model"]["task"] == "preference_tuning"


def test_a_chat_that_does_not_end_with_the_user_is_refused(dpo_server: InProcess) -> None:
    chat = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    predict = dpo_server.url + dpo_server.settings.predict_route
    response = httpx.post(predict, json={"instances": [{"messages": chat}]}, timeout=60)
    assert response.status_code == 400
    assert "it must end with the user's, which the model answers" in response.text


def test_the_page_is_the_chat(dpo_server: InProcess) -> None:
    page = httpx.get(dpo_server.url + "/", timeout=10)
    assert page.status_code == 200
    assert '<div id="turns"' in page.text and 'id="reset"' in page.text  # the chat widget
    assert "<title>Chat</title>" in page.text
