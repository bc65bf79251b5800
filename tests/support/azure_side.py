"""Real Azure SDK clients pointed at the simulator's Azure side (``AzureOptions(arm_port=0)``).

Azure itself cannot run here, so the simulator plays ARM, Resource Graph and the Event Grid feed;
what talks to it is the SDK a coordinator uses, unmodified:

- ``graph_client``: ``azure-mgmt-resourcegraph``'s ``ResourceGraphClient`` with ``base_url`` = the
  simulator's ARM URL and the test CA as ``connection_verify``;
- ``arm_pipeline``: ``azure-mgmt-core``'s ``ARMPipelineClient`` (what ``acknowledge`` needs, as no
  generated client is used for it), with ARM's challenge-aware bearer policy;
- ``managed_identity``: azure-identity's ``ManagedIdentityCredential``, which gets the ARM test
  token from the simulator's IMDS (``AZURE_POD_IDENTITY_AUTHORITY_HOST`` = its URL), as on a VM.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.simulator import SimulatorServer

ARM_SCOPE = "https://management.azure.com/.default"
ACK_VERSION = "2025-11-01"
IDENTITY_VARIABLES = (
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
    "IDENTITY_SERVER_THUMBPRINT",
    "IMDS_ENDPOINT",
    "MSI_ENDPOINT",
    "MSI_SECRET",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_TENANT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
)


class FixedToken:
    """A credential that answers one token (for the tests of a wrong or missing token)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self.token, int(time.time()) + 3600)


def identity_env(server: SimulatorServer) -> dict[str, str]:
    """The environment that points ``ManagedIdentityCredential`` at the simulator's IMDS."""
    return {"AZURE_POD_IDENTITY_AUTHORITY_HOST": server.url}


@contextmanager
def managed_identity(server: SimulatorServer) -> Iterator[Any]:
    """A real ``ManagedIdentityCredential`` that gets the simulator's ARM token from its IMDS."""
    from azure.identity import ManagedIdentityCredential

    with pytest.MonkeyPatch.context() as patch:
        for name in IDENTITY_VARIABLES:
            patch.delenv(name, raising=False)
        for name, value in identity_env(server).items():
            patch.setenv(name, value)
        credential = ManagedIdentityCredential()
        try:
            yield credential
        finally:
            credential.close()


def graph_client(server: SimulatorServer, credential: Any, ca_file: Path, **kwargs: Any) -> Any:
    from azure.mgmt.resourcegraph import ResourceGraphClient

    assert server.azure is not None
    kwargs.setdefault("retry_backoff_factor", 0.1)
    return ResourceGraphClient(
        credential, base_url=server.azure.arm_url, connection_verify=str(ca_file), **kwargs
    )


def arm_pipeline(server: SimulatorServer, credential: Any | None, ca_file: Path, **kwargs: Any) -> Any:
    """An ``ARMPipelineClient`` for the simulator's ARM; ``credential=None`` sends no token."""
    from azure.core.pipeline import policies
    from azure.mgmt.core import ARMPipelineClient
    from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy, ARMHttpLoggingPolicy

    assert server.azure is not None
    chain: list[Any] = [
        policies.RequestIdPolicy(),
        policies.HeadersPolicy(),
        policies.UserAgentPolicy(),
        policies.RetryPolicy(retry_total=kwargs.pop("retry_total", 3), retry_backoff_factor=0.1),
    ]
    if credential is not None:
        chain.append(ARMChallengeAuthenticationPolicy(credential, ARM_SCOPE))
    chain += [policies.ContentDecodePolicy(), ARMHttpLoggingPolicy()]
    return ARMPipelineClient(
        base_url=server.azure.arm_url, policies=chain, connection_verify=str(ca_file), **kwargs
    )


def send(pipeline: Any, method: str, path: str, **kwargs: Any) -> Any:
    """One request to ``path`` (with its query string) on the simulated ARM."""
    from azure.core.rest import HttpRequest

    return pipeline.send_request(HttpRequest(method, pipeline.format_url(path), **kwargs))


def acknowledge(pipeline: Any, event_path: str, *, ids: list[str] | None = None) -> Any:
    """POST ``<event_path>/acknowledge`` (or, with ``ids``, the list variant on ``event_path``)."""
    url = f"{event_path}/acknowledge" if ids is None else event_path
    return send(
        pipeline, "POST", f"{url}?api-version={ACK_VERSION}", json=None if ids is None else {"value": ids}
    )


def owner_path(server: SimulatorServer, event_id: str) -> str:
    """The ARM id of the scheduled event ``event_id`` (``.../scheduledevents/<EventId>``)."""
    assert server.azure is not None
    record = server.azure.ledger.get(event_id)
    assert record is not None, f"Azure never saw {event_id}"
    return record.resource_id


def query_pages(client: Any, query: str, **options: Any) -> list[Any]:
    """Every page of ``query`` (objectArray), following ``$skipToken``."""
    from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions

    pages, token = [], None
    while True:
        answer = client.resources(
            QueryRequest(
                query=query,
                options=QueryRequestOptions(result_format="objectArray", skip_token=token, **options),
            )
        )
        pages.append(answer)
        token = answer.skip_token
        if not token:
            return pages


def rows(client: Any, query: str, **options: Any) -> list[Mapping[str, Any]]:
    return [row for page in query_pages(client, query, **options) for row in page.data]
