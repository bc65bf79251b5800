"""Fixtures: the ingestion stand-in over HTTPS (test CA), and a managed-identity token endpoint on
loopback that azure-identity's real ManagedIdentityCredential calls (its IMDS path, moved to
loopback by AZURE_POD_IDENTITY_AUTHORITY_HOST, as on a VM but for the address)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.sinks import logs_ingestion
from se_forwarder.sinks.logs_rows import COLUMNS, STREAM
from tests.support.ingestion_endpoint import IngestionEndpoint
from tests.support.receiver import Receiver, Reply, TlsFiles, make_tls

RULE_ID = "dcr-4f1c0d9a3b2e4c5d8e7f6a5b4c3d2e1f"
TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.monitor-token"
TOKEN_PATH = "/metadata/identity/oauth2/token"
IDENTITY_VARIABLES = (
    "IDENTITY_ENDPOINT", "IDENTITY_HEADER", "IDENTITY_SERVER_THUMBPRINT", "IMDS_ENDPOINT", "MSI_ENDPOINT",
    "MSI_SECRET", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID",
    "AZURE_CLIENT_CERTIFICATE_PATH", "AZURE_USERNAME", "AZURE_PASSWORD", "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_TOKEN_CREDENTIALS", "AZURE_AUTHORITY_HOST",
)


def token_reply(token: str = TOKEN) -> Reply:
    body = {"access_token": token, "expires_in": "3600", "expires_on": str(int(time.time()) + 3600),
            "resource": "https://monitor.azure.com", "token_type": "Bearer"}
    return Reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())


def token_requests(identity: Receiver) -> list[Any]:
    return [r for r in identity.requests if r.path.startswith(TOKEN_PATH)]


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls(tmp_path_factory.mktemp("logs-tls"))


@pytest.fixture
def identity(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """The token endpoint, answering with TOKEN; nothing else in the environment names an identity."""
    for name in IDENTITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with Receiver(path="/unused") as server:
        server.route(TOKEN_PATH, token_reply())
        monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", f"http://127.0.0.1:{server.port}")
        yield server


@pytest.fixture
def endpoint(tls: TlsFiles) -> Iterator[IngestionEndpoint]:
    with IngestionEndpoint(tls, rule_id=RULE_ID, stream=STREAM, columns=dict(COLUMNS), token=TOKEN) as e:
        yield e


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def options_for(endpoint: IngestionEndpoint, tls: TlsFiles, **options: Any) -> dict[str, Any]:
    """Options for ``endpoint`` trusting the test CA; an option given as None is left out."""
    merged = {"endpoint": f"https://127.0.0.1:{endpoint.port}", "rule_id": RULE_ID,
              "ca_file": str(tls.ca_cert), **options}
    return {k: v for k, v in merged.items() if v is not None}


def logs_sink(endpoint: IngestionEndpoint, tls: TlsFiles, name: str = "logs",
              **options: Any) -> logs_ingestion.LogsIngestionSink:
    """A logs-ingestion sink built as the agent builds one: validated, then created."""
    checked = logs_ingestion.validate(options_for(endpoint, tls, **options), "sinks[0]")
    return logs_ingestion.create(name, checked, None)
