"""The Vertex AI stand-in the CLI tests here submit to, with the real `aiplatform` SDK."""

from collections.abc import Iterator

import pytest

from ..registry.vertex_standin import VertexStandIn, aiplatform_settings_restored

PROJECT, REGION = "test-project", "us-central1"


@pytest.fixture
def api(gcs_emulator: str) -> Iterator[VertexStandIn]:
    """The stand-in, with the SDK pointed at it (REST, no credentials) for the test's length.

    Cloud Storage (the SDK checks the pipeline root's bucket) is the emulator.
    """
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform

    with aiplatform_settings_restored(), VertexStandIn(PROJECT, REGION) as standin:
        aiplatform.init(
            api_endpoint=standin.url, api_transport="rest", credentials=AnonymousCredentials()
        )
        yield standin
