"""The server against real clients: health while loading, concurrent clients, the page.

They share one server (conftest.py's `server`), which loads the model from a gs:// folder on
the GCS emulator (as Vertex hands it over in AIP_STORAGE_URI), with Vertex's route variables
set to other paths than the defaults.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import httpx

from .servers import HEALTH, PREDICT, Server, wait_for

CLIENTS = 32


def test_health_answers_503_while_loading_then_200(
    server: Server, gs_model: tuple[str, int]
) -> None:
    codes = server.health_codes
    assert codes[0] == 503 and codes[-1] == 200, codes
    assert set(codes) == {503, 200} and codes == sorted(codes, reverse=True), codes
    assert httpx.get(server.url + HEALTH).json() == {"status": "ready"}
    # The gs:// folder came down whole, its nested subfolder included.
    uri, files = gs_model
    log = server.spawned.output()
    assert f"copied {uri} ({files} files)" in log
    # Probes every few seconds for the server's life: none is an access line, and loading
    # says itself that it is done (with how long it took), with no progress bar's redraws.
    assert f"GET {HEALTH}" not in log and "Loading weights" not in log, log
    assert re.search(r"model loaded in \d+ s, ready: ", log), log
    httpx.post(server.url + PREDICT, json={"instances": []})
    wait_for(
        lambda: re.search(r'"POST \S+ HTTP/1.1" 400', server.spawned.output()) is not None,
        timeout_s=10,
        what="the access line of a request that is not a probe",
    )


def test_every_concurrent_client_gets_its_own_unbatched_answer(
    server: Server, documents: list[str], reference: Any
) -> None:
    texts = documents[:CLIENTS]
    beams = {"num_beams": 2, "max_new_tokens": 12}
    # A quarter of the clients ask for other settings: they must not share a generate call.
    asks = [beams if i % 4 == 3 else None for i in range(CLIENTS)]
    greedy = reference([t for t, a in zip(texts, asks, strict=True) if a is None])
    beamed = reference([t for t, a in zip(texts, asks, strict=True) if a], **beams)
    expected = [beamed.pop(0) if a else greedy.pop(0) for a in asks]
    assert len(set(expected)) >= CLIENTS // 2, "the model's summaries do not depend on its input"

    before = server.stats()
    start = threading.Barrier(CLIENTS)
    answers: list[Any] = [None] * CLIENTS

    def client(i: int) -> None:
        body: dict[str, Any] = {"instances": [{"text": texts[i]} if i % 2 else texts[i]]}
        if asks[i]:
            body["parameters"] = asks[i]
        with httpx.Client(timeout=120) as http:
            start.wait()
            answers[i] = http.post(server.url + PREDICT, json=body)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [a.status_code for a in answers] == [200] * CLIENTS
    got = [a.json()["predictions"] for a in answers]
    assert got == [[text] for text in expected]
    after = server.stats()
    calls = after["model_calls"] - before["model_calls"]
    assert after["instances_run"] - before["instances_run"] == CLIENTS
    assert calls < CLIENTS // 2, f"{calls} generate calls for {CLIENTS} requests: no batching"
    assert max(int(size) for size in after["batch_sizes"]) > 1


def test_one_request_with_several_instances_keeps_their_order(
    server: Server, documents: list[str], reference: Any
) -> None:
    texts = [documents[40], documents[41][:200], documents[42]]
    response = server.post({"instances": texts, "parameters": {"max_new_tokens": 8}})
    assert response.status_code == 200, response.text
    assert response.json() == {"predictions": reference(texts, max_new_tokens=8)}


def test_page_is_served_self_contained(server: Server) -> None:
    page = httpx.get(server.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert json.dumps(PREDICT) in page.text  # the page calls this server's predict route
    assert "http://" not in page.text and "https://" not in page.text  # nothing external
