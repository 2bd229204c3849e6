"""`--upload-template`: the compiled pipeline goes to a KFP template repository through
kfp's real `RegistryClient`, as a multipart upload with its tags, to a stand-in for
Artifact Registry's KFP endpoint on loopback (`POST /PROJECT/REPO`, form fields `content`
and `tags`, answering `PACKAGE/sha256:DIGEST` as the real one does)."""

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_pipeline import __version__, cli

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "small1vm1gpu.json")


@dataclass
class Upload:
    path: str
    content_type: str
    fields: dict[str, bytes]
    filename: str | None


@dataclass
class TemplateRegistry:
    """What the stand-in received."""

    uploads: list[Upload] = field(default_factory=list)
    url: str = ""


def parse_multipart(content_type: str, body: bytes) -> tuple[dict[str, bytes], str | None]:
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, bytes] = {}
    filename = None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[str(name)] = part.get_payload(decode=True)
        filename = part.get_filename() or filename
    return fields, filename


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TemplateRegistry]:
    # RegistryClient reads ~/.config/kfp: a HOME of the test's own.
    monkeypatch.setenv("HOME", str(tmp_path))
    received = TemplateRegistry()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            content_type = self.headers["Content-Type"]
            fields, filename = parse_multipart(content_type, body)
            received.uploads.append(Upload(self.path, content_type, fields, filename))
            spec: dict[str, Any] = yaml.safe_load(fields["content"])
            answer = (
                f"{spec['pipelineInfo']['name']}/sha256:"
                f"{hashlib.sha256(fields['content']).hexdigest()}"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    received.url = f"http://127.0.0.1:{server.server_address[1]}/test-project/pipelines"
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()


def test_the_template_is_uploaded_with_the_version_and_latest_tags(
    registry: TemplateRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--config", CONFIG, "--upload-template", registry.url]) == 0
    (upload,) = registry.uploads
    assert upload.path == "/test-project/pipelines"
    assert upload.content_type.startswith("multipart/form-data; boundary=")
    assert upload.fields["tags"].decode() == f"{__version__},latest"
    spec = yaml.safe_load(upload.fields["content"])
    assert spec["pipelineInfo"]["name"] == "t5-small-cnndm"
    assert set(spec["root"]["inputDefinitions"]["parameters"]) >= {"epochs", "node_count"}
    assert upload.filename == "t5-small-cnndm.yaml"
    digest = hashlib.sha256(upload.fields["content"]).hexdigest()
    out = capsys.readouterr().out
    assert f"Uploaded the template t5-small-cnndm to {registry.url}" in out
    assert f"version: sha256:{digest}  (tags: {__version__}, latest)" in out
    assert f"pinned template: {registry.url}/t5-small-cnndm/sha256:{digest}" in out


@pytest.mark.parametrize(
    "host",
    ["us-central1-kfp.pkg.dev/proj/repo", "https://us-central1-kfp.pkg.dev/proj", "ftp://x/y"],
)
def test_a_malformed_repository_url_is_refused_before_any_call(
    registry: TemplateRegistry, capsys: pytest.CaptureFixture[str], host: str
) -> None:
    assert cli.main(["--config", CONFIG, "--upload-template", host]) == 2
    err = capsys.readouterr().err
    assert "https://REGION-kfp.pkg.dev/PROJECT/REPOSITORY" in err and "Traceback" not in err
    assert registry.uploads == []


def test_a_refused_upload_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    from tests.conftest import free_loopback_port

    closed = f"http://127.0.0.1:{free_loopback_port()}/test-project/pipelines"
    assert cli.main(["--config", CONFIG, "--upload-template", closed]) == 1
    err = capsys.readouterr().err
    assert f"uploading the template to {closed} failed" in err and "Traceback" not in err
