"""A stand-in for Artifact Registry's KFP upload endpoint on loopback, for kfp's real
`RegistryClient`: `POST /PROJECT/REPOSITORY` as multipart form data with the spec as the
`content` file and the comma-joined `tags` field, answered `PACKAGE/sha256:DIGEST` (the
package is the spec's pipeline name) as the real endpoint answers. Every upload is
recorded with its fields and headers."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP

import yaml

from ..standins.loopback import LoopbackServer


@dataclass(frozen=True)
class Upload:
    """One upload as received."""

    path: str
    headers: dict[str, str]  #: names in lowercase
    fields: dict[str, bytes]
    filename: str | None


def parse_form(content_type: str, body: bytes) -> tuple[dict[str, bytes], str | None]:
    """The form's fields, and the file name of its file part."""
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, bytes] = {}
    filename = None
    for part in message.iter_parts():
        name = str(part.get_param("name", header="content-disposition"))
        fields[name] = part.get_payload(decode=True)
        filename = part.get_filename() or filename
    return fields, filename


class ArtifactRegistryStandIn(LoopbackServer):
    """Uploads to one repository; `host` is what `--upload-template` takes."""

    def __init__(self, project: str = "test-project", repository: str = "pipelines") -> None:
        self.path = f"/{project}/{repository}"
        self.uploads: list[Upload] = []

    @property
    def host(self) -> str:
        return f"{self.url}{self.path}"

    def respond(
        self, method: str, target: str, headers: Message, raw: bytes
    ) -> tuple[int, str, bytes]:
        content_type = headers.get("Content-Type", "")
        if method != "POST" or target != self.path:
            return 404, "text/plain", f"no repository at {method} {target}".encode()
        if not content_type.startswith("multipart/form-data"):
            return 400, "text/plain", b"expected multipart/form-data"
        fields, filename = parse_form(content_type, raw)
        lowered = {key.lower(): value for key, value in headers.items()}
        self.uploads.append(Upload(target, lowered, fields, filename))
        if "content" not in fields:
            return 400, "text/plain", b"missing the content file"
        tags = fields.get("tags", b"").decode().split(",")
        if any(tag.startswith("sha256:") for tag in tags):
            return 400, "text/plain", b"a tag may not start with sha256:"
        name = yaml.safe_load(fields["content"])["pipelineInfo"]["name"]
        digest = hashlib.sha256(fields["content"]).hexdigest()
        return 200, "text/plain", f"{name}/sha256:{digest}".encode()
