"""What everything talking to Azure shares: credentials, connection strings, scrubbing, SDK log levels.

Used by the Event Hubs and Logs ingestion sinks, the webhook sink's Entra tokens, the approval queue
and the fleet commands. Azure packages are imported only inside the functions, when called.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError

CREDENTIALS = ("managed-identity", "default")
MALFORMED_EVENTHUBS = ("connection string is malformed (needs Endpoint=sb://...;"
                       "SharedAccessKeyName=...;SharedAccessKey=...)")
_SECRET_PATTERNS = (
    re.compile(r"(SharedAccessKey\s*=\s*)[^;\s'\"]+", re.IGNORECASE),
    re.compile(r"(SharedAccessSignature\s*=?\s*)[^;\s'\"]+", re.IGNORECASE),
    re.compile(r"(\bsig=)[^&\s'\"]+", re.IGNORECASE),
)
# The SDKs log every AMQP state change and HTTP request at INFO; azure-identity warns on every
# failed get_token, i.e. on every retry, which the caller's own reason already says once.
SDK_LOG_LEVELS = {
    "azure.eventhub": logging.WARNING,
    "azure.core.pipeline.policies.http_logging_policy": logging.WARNING,
    "azure.identity": logging.ERROR,
}


def token_credential(kind: str = "managed-identity", client_id: str | None = None) -> Any:
    """``ManagedIdentityCredential`` (``managed-identity``, optionally user-assigned by
    ``client_id``) or ``DefaultAzureCredential`` (``default``)."""
    if kind == "managed-identity":
        from azure.identity import ManagedIdentityCredential

        return ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()
    from azure.identity import DefaultAzureCredential

    if client_id:
        return DefaultAzureCredential(managed_identity_client_id=client_id)
    return DefaultAzureCredential()


def read_connection_string(env_name: str | None, file: str | Path | None = None,
                           environ: Mapping[str, str] | None = None) -> str | None:
    """The connection string from ``file`` (when given) or the variable ``env_name`` (when set);
    None when neither holds one. ConfigError when the file cannot be read or is empty."""
    environ = os.environ if environ is None else environ
    if file:
        try:
            text = Path(file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            raise ConfigError(f"cannot read {file}: {reason}") from None
        if not text:
            raise ConfigError(f"{file} is empty")
        return text
    if env_name:
        return environ.get(env_name, "").strip() or None
    return None


def connection_settings(conn: str) -> dict[str, str]:
    """Key/value pairs of a connection string, keys lower-cased (values are never logged)."""
    settings = {}
    for part in conn.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            settings[key.strip().lower()] = value.strip()
    return settings


def eventhubs_target(conn: str, *, key_name_required: bool = True) -> tuple[str, str | None]:
    """(namespace host, EntityPath or None) of an Event Hubs connection string; ConfigError when it
    is malformed."""
    settings = connection_settings(conn)
    endpoint = settings.get("endpoint", "")
    if not endpoint.lower().startswith("sb://") or (
            key_name_required and not settings.get("sharedaccesskeyname")):
        raise ConfigError(f"the {MALFORMED_EVENTHUBS}")
    return endpoint[len("sb://"):].strip("/"), settings.get("entitypath") or None


def scrub(text: str, secret: str | None = None) -> str:
    """``text`` on one line, without keys, signatures or the connection string itself."""
    if secret:
        text = text.replace(secret, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1***", text)
    return " ".join(text.split())


def quiet_sdk_logs() -> None:
    """Keep the agent's log about the agent (a level someone set explicitly is left alone)."""
    for name, level in SDK_LOG_LEVELS.items():
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(level)
