"""A real HTTP server on 127.0.0.1 in a thread, shared by the stand-ins for cloud REST APIs
(Vertex AI, Artifact Registry): this owns the socket, the thread and the shutdown, so a
stand-in is only its API (`respond`)."""

from __future__ import annotations

import threading
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class LoopbackServer:
    """Subclasses answer `respond`; use as `with Sub(...) as api: ... api.url ...`."""

    _server: ThreadingHTTPServer | None = None

    def respond(
        self, method: str, target: str, headers: Message, raw: bytes
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request; `target` is path and query."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                code, content_type, data = owner.respond(self.command, self.path, self.headers, raw)
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
