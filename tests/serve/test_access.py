"""Who may call the server: loopback unless in a container, a bearer token when one is set
(constant-time compared), Host headers on loopback (DNS rebinding), and what a failed load
tells a caller without the token."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llm_pipeline.cli.serve import _log_settings
from llm_pipeline.errors import ServeError
from llm_pipeline.serve.server_process import RunningServer
from llm_pipeline.serve.settings import Settings, load_settings

from ..chromium import devtools
from .servers import InProcess, serve_in_thread, wait_for

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    """A token server whose model cannot load (a folder that is not there): every check
    here is made before the model would be asked anything."""
    missing = tmp_path_factory.mktemp("access") / "no-model-here"
    with serve_in_thread(model_uri=str(missing), token=TOKEN) as running:
        wait_for(lambda: running.state.error is not None, timeout_s=30, what="the load to fail")
        yield running


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_loopback_unless_the_container_contract_says_otherwise() -> None:
    assert load_settings({}).host == "127.0.0.1"
    assert load_settings({"AIP_HTTP_PORT": "8080"}).host == "0.0.0.0"  # Vertex sets it
    assert load_settings({"AIP_HTTP_PORT": "8080"}, host="127.0.0.1").host == "127.0.0.1"
    assert load_settings({}, host="0.0.0.0").host == "0.0.0.0"


def test_predict_and_stats_need_the_token(locked: InProcess) -> None:
    predict = locked.url + locked.settings.predict_route
    body = {"instances": ["a text"]}
    missing = httpx.post(predict, json=body)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json() == {
        "error": "this route needs `Authorization: Bearer TOKEN` (LLM_PIPELINE_SERVE_TOKEN)"
    }
    wrong = httpx.post(predict, json=body, headers=_bearer(TOKEN[:-1] + "X"))
    assert wrong.status_code == 401 and wrong.json() == {"error": "the bearer token does not match"}
    # The right token passes the door: the route itself answers (the model failed to load).
    right = httpx.post(predict, json=body, headers=_bearer(TOKEN))
    assert right.status_code == 503 and "no such folder" in right.json()["error"]

    assert httpx.get(locked.url + "/stats").status_code == 401
    stats = httpx.get(locked.url + "/stats", headers=_bearer(TOKEN))
    assert stats.status_code == 200 and stats.json()["ready"] is False


def test_a_failed_health_check_says_why_only_to_the_token(locked: InProcess) -> None:
    health = locked.url + locked.settings.health_route
    anonymous = httpx.get(health)  # Vertex's probe: no credentials, not refused
    assert anonymous.status_code == 503 and anonymous.json() == {"status": "failed"}
    told = httpx.get(health, headers=_bearer(TOKEN)).json()
    assert told["status"] == "failed"
    assert told["error"] == f"model folder {locked.settings.model_uri}: no such folder"


def test_the_page_is_open_and_asks_for_the_token(locked: InProcess) -> None:
    page = httpx.get(locked.url + "/")
    assert page.status_code == 200
    assert 'id="token"' in page.text and TOKEN not in page.text


def test_a_host_that_is_not_this_machine_is_refused_on_loopback(locked: InProcess) -> None:
    port = locked.settings.port
    for path in ("/", locked.settings.health_route, "/stats"):
        rebound = httpx.get(locked.url + path, headers={"Host": f"evil.example:{port}"})
        assert rebound.status_code == 400, path
        assert rebound.json()["error"] == (
            f"Host header 'evil.example:{port}' does not name this server: it listens on "
            "127.0.0.1 only; call it as 127.0.0.1 or localhost"
        )
    # The name counts, not the port: `ssh -L 9000:localhost:PORT` forwarding still works.
    for host in ("localhost:9000", "127.0.0.1", "[::1]:8080", "LOCALHOST"):
        answer = httpx.get(locked.url + "/", headers={"Host": host})
        assert answer.status_code == 200, host


def test_the_token_never_reaches_the_log(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(model_uri="m", token=TOKEN)
    with caplog.at_level(logging.INFO, logger="llm_pipeline.serve"):
        _log_settings(settings)
    assert "'token': 'set'" in caplog.text and TOKEN not in caplog.text
    assert TOKEN not in repr(settings) and TOKEN not in str(settings.model_dump())


def test_a_server_without_a_token_is_open(tmp_path: Path) -> None:
    with serve_in_thread(model_uri=str(tmp_path / "none")) as running:
        wait_for(lambda: running.state.error is not None, timeout_s=30, what="the load to fail")
        assert httpx.get(running.url + "/stats").status_code == 200
        health = httpx.get(running.url + running.settings.health_route).json()
        assert health["error"].endswith("no such folder")


def test_the_page_sends_the_token_from_its_fragment_in_chromium(
    causal_lm_dir: Path, tmp_path: Path
) -> None:
    # A chat server behind a token: `/?message=...` sends at once; `#token=...` fills the box.
    with serve_in_thread(
        model_uri=str(causal_lm_dir),
        task="instruction_tuning",
        token=TOKEN,
        parameters={"max_new_tokens": 2},
    ) as running:
        wait_for(lambda: running.state.ready, timeout_s=90, what="the model to load")
        asked = f"{running.url}/?message=Hello"
        script = (
            "document.body.dataset.state + '|' + document.getElementById('status').textContent"
            " + '|' + location.hash + '|' + document.getElementById('token').value"
        )
        with devtools(work=tmp_path) as page:
            # Not page.open: it waits for the address it asked for, and the page drops the #.
            page.call("Page.navigate", url=asked + f"#token={TOKEN}")
            page.wait_until(
                "['done', 'error'].includes(document.body.dataset.state)", what="the answer"
            )
            state, status, fragment, box = page.evaluate(script).split("|")
            assert (state, fragment, box) == ("done", "", TOKEN), status
            assert page.evaluate("document.querySelectorAll('#turns .turn').length") == 2
        fresh = tmp_path / "fresh"  # another profile: no token in its sessionStorage
        fresh.mkdir()
        with devtools(work=fresh) as page:  # no token: the server's 401, shown
            page.open(asked)
            page.wait_until(
                "['done', 'error'].includes(document.body.dataset.state)", what="the refusal"
            )
            state, status, _, _ = page.evaluate(script).split("|")
            assert state == "error"
            assert status == (
                "Error: this route needs `Authorization: Bearer TOKEN` (LLM_PIPELINE_SERVE_TOKEN)"
            )


def test_start_servers_client_sends_the_token_its_server_has(locked: InProcess) -> None:
    # What the deploy step's check calls (RunningServer.predict), on the token server.
    url = locked.url
    predict = url + locked.settings.predict_route
    fields = {"url": url, "health_url": url, "predict_url": predict, "process": None}
    with pytest.raises(ServeError, match="answered 401"):
        RunningServer(**fields, log_path=Path("unused")).predict(["a text"])
    with pytest.raises(ServeError, match=r"answered 503: model folder .*: no such folder"):
        RunningServer(**fields, log_path=Path("unused"), token=TOKEN).predict(["a text"])
