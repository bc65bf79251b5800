"""webhook sink: CloudEvents over HTTP(S), signed per Standard Webhooks, retried, never lost.

The package's parts, one concern each:

- ``config``: ``WebhookOptions``, the checked options with their defaults;
- ``auth``: Standard Webhooks signatures (the ``standardwebhooks`` library), static headers and
  Entra bearer tokens; secrets are read at start and never logged, nor is the URL's query string;
- ``transport``: the endpoint's HTTP session and one-line reasons for transport failures;
- ``handshake``: the CloudEvents abuse-protection OPTIONS handshake and the allowed rate;
- ``delivery``: the sink itself (wire forms, batches, status codes to outcomes).

``format = "teams" | "slack"`` posts a chat message per event instead of the CloudEvent; what that
changes is in ``sinks/chat.py``.
"""

from __future__ import annotations

from typing import Any

from ...validation import check_ca_file
from .auth import EntraToken, Signer, TokenError, header_values, read_secrets
from .config import WebhookOptions
from .delivery import WebhookSink, batch_id

__all__ = ["EntraToken", "Signer", "TokenError", "WebhookOptions", "WebhookSink", "batch_id",
           "create", "validate"]


def validate(options: dict[str, Any], where: str) -> WebhookOptions:
    """Check every key cheaply (no file or environment reads); defaults filled in."""
    return WebhookOptions.parse(options, where)


def create(name: str, options: WebhookOptions, ctx: Any) -> WebhookSink:
    """Read the secrets, CA bundle and header values now (a missing one stops the start)."""
    where = f"sink {name!r}"
    secrets = read_secrets(options.secret_env, options.secret_file, where)
    headers = header_values(options.headers, where)
    if options.ca_file:
        check_ca_file(options.ca_file, f"{where} ca_file")
    token = EntraToken(options.scope or "", options.client_id) if options.auth == "entra" else None
    return WebhookSink(name, options, secrets=secrets, headers=headers, token=token,
                       state_dir=getattr(ctx, "state_dir", None))
