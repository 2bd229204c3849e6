"""Who may call the server: a bearer token where one is set, and on loopback only clients
that name this machine in their Host header.

* `LLM_PIPELINE_SERVE_TOKEN` set: the predict route and `/stats` answer 401 unless the
  request carries `Authorization: Bearer TOKEN`, compared in constant time
  (`hmac.compare_digest`: a wrong guess takes as long whatever prefix it shares). The
  health route stays open, since Vertex AI and Kubernetes probe it without credentials, but
  tells only a caller with the token why a load failed (the error names the model's URI).
  The page at `/` stays open too: a browser cannot send a header on a link, so the page
  asks for the token and sends it itself.
* Bound to loopback: a request whose Host header names another machine is refused (400).
  A web page at `evil.example` whose name the attacker re-points at 127.0.0.1 (DNS
  rebinding) makes the browser send `Host: evil.example`; real local clients name
  127.0.0.1 or localhost. Only the name is compared, not the port, so `ssh -L 9000:...`
  forwarding still works.

A pure ASGI middleware, so a refusal comes before any route reads a body.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

from llm_pipeline.serve.settings import LOOPBACK, Settings, env_name


class AccessGuard:
    """Refuse requests by Host (on loopback) and by token (on the protected routes)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.protected = frozenset({settings.predict_route, "/stats"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await _answer(send, *refusal)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        headers = dict(scope["headers"])
        if self.settings.on_loopback:
            host = headers.get(b"host", b"").decode("latin-1")
            if host_name(host) not in LOOPBACK | {self.settings.host}:
                shown = repr(host) if host else "none"
                message = (
                    f"Host header {shown} does not name this server: it listens on "
                    f"{self.settings.host} only; call it as 127.0.0.1 or localhost"
                )
                return 400, message, []
        if scope["path"] in self.protected and not is_trusted(headers, self.settings):
            given = b"authorization" in headers
            message = (
                "the bearer token does not match"
                if given
                else f"this route needs `Authorization: Bearer TOKEN` ({env_name('token')})"
            )
            return 401, message, [(b"www-authenticate", b"Bearer")]
        return None


def is_trusted(headers: dict[bytes, bytes], settings: Settings) -> bool:
    """Whether the request may see everything: no token is set, or it carries the token."""
    if settings.token is None:
        return True
    expected = b"Bearer " + settings.token.get_secret_value().encode()
    return hmac.compare_digest(headers.get(b"authorization", b""), expected)


def host_name(host: str) -> str:
    """The name in a Host header, without its port: `[::1]:8080` → `::1`."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0].lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


async def _answer(send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + extra})
    await send({"type": "http.response.body", "body": body})
