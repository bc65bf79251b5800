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
from ..validation import is_loopback

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


def _host(url: str) -> str:
    """The host of ``scheme://host[:port]/...`` (``[::1]`` without its brackets)."""
    rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def plaintext_problem(conn: str) -> str | None:
    """Why ``conn`` would send in plaintext to a host that is not loopback (one line, nothing
    secret), or None. Plaintext is for local emulators only: an Event Hubs connection string with
    ``UseDevelopmentEmulator=true``, a Storage one with ``DefaultEndpointsProtocol=http`` or an
    ``http://`` endpoint."""
    settings = connection_settings(conn)
    if settings.get("usedevelopmentemulator", "").lower() == "true":
        host = _host(settings.get("endpoint", ""))
        if not is_loopback(host):
            return (f"the Event Hubs connection string has UseDevelopmentEmulator=true (no TLS) "
                    f"for {host or 'no host'}, which is not loopback; emulators run on 127.0.0.1")
    plain = settings.get("defaultendpointsprotocol", "").lower() == "http"
    endpoints = {k: v for k, v in settings.items() if k.endswith("endpoint") and k != "endpoint"}
    for key, url in endpoints.items():
        if url.lower().startswith("http://") and not is_loopback(_host(url)):
            return (f"the Storage connection string's {key} is http:// (no TLS) to {_host(url)}, "
                    "which is not loopback; use https")
    if plain and not any(k in endpoints for k in ("queueendpoint", "blobendpoint")) and (
            settings.get("usedevelopmentstorage", "").lower() != "true"):
        account = settings.get("accountname", "")
        return (f"the Storage connection string has DefaultEndpointsProtocol=http (no TLS) for "
                f"account {account or '?'}, which is not loopback; use https")
    return None


def check_plaintext(conn: str, where: str) -> None:
    """ConfigError naming ``where`` when ``conn`` would send in plaintext to a remote host."""
    problem = plaintext_problem(conn)
    if problem:
        raise ConfigError(f"{where}: {problem}")


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
