"""The managed-identity token endpoint of the simulated IMDS, for Azure SDK credentials.

``GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=<audience>`` with
``Metadata: true`` answers the simulator's ARM test token, as IMDS answers a VM's managed
identity. azure-identity's ``ManagedIdentityCredential`` (and ``DefaultAzureCredential``) call it
when ``AZURE_POD_IDENTITY_AUTHORITY_HOST`` is the simulator's IMDS URL, so a coordinator run
against the simulator uses its real credential code and gets a token only the simulated ARM takes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

TOKEN_PATH = "/metadata/identity/oauth2/token"  # noqa: S105 - a URL path, not a secret
API_VERSIONS = ("2018-02-01", "2019-08-01")
LIFETIME = 3600


def token_answer(
    query: Mapping[str, str], metadata_header: str | None, token: str, now: float | None = None
) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) for one token request."""
    if (metadata_header or "").strip().lower() != "true":
        return 400, {
            "error": "invalid_request",
            "error_description": "Required metadata header not specified",
        }
    if query.get("api-version") not in API_VERSIONS:
        return 400, {
            "error": "invalid_request",
            "error_description": f"api-version must be one of {', '.join(API_VERSIONS)}",
        }
    resource = query.get("resource", "")
    if not resource:
        return 400, {
            "error": "invalid_request",
            "error_description": "Required query variable 'resource' is missing",
        }
    issued = int(time.time() if now is None else now)
    return 200, {
        "access_token": token,
        "client_id": "00000000-0000-0000-0000-00000000c0de",
        "expires_in": str(LIFETIME),
        "expires_on": str(issued + LIFETIME),
        "ext_expires_in": str(LIFETIME),
        "not_before": str(issued),
        "resource": resource,
        "token_type": "Bearer",
    }
