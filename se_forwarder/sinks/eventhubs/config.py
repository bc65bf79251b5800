"""The eventhubs sink's options: one frozen dataclass, every key checked once, the defaults in it.

Cheap: reads no secret. ``eventhub`` is always required (it keys the sink's default name, which must
not depend on a secret); ``fully_qualified_namespace`` is required except with a connection string,
which carries its own endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError
from ...validation import as_choice, as_http_url, as_str, is_loopback, no_unknown
from ..azure_common import CREDENTIALS as TOKEN_CREDENTIALS
from ..base import SinkOptions, sink_name

CREDENTIALS = (*TOKEN_CREDENTIALS, "connection-string")
MODES = ("structured", "binary")
# AMQP over TCP port 5671, or over WebSockets on port 443 (networks that let only HTTPS out).
TRANSPORTS = ("amqp", "amqp-websockets")
KNOWN_KEYS = (
    "name",
    "fully_qualified_namespace",
    "eventhub",
    "credential",
    "client_id",
    "connection_string_env",
    "connection_string_file",
    "mode",
    "transport",
    "custom_endpoint_address",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, kw_only=True)
class EventHubsOptions(SinkOptions):
    """One ``[[sinks]] type = "eventhubs"`` table, checked."""

    eventhub: str
    fully_qualified_namespace: str | None = None  # from the connection string when not given
    credential: str = "managed-identity"
    client_id: str | None = None  # a user-assigned identity (managed-identity or default)
    connection_string_env: str | None = None  # with credential = connection-string: one of
    connection_string_file: str | None = None  # these two
    mode: str = "structured"
    transport: str = "amqp"
    custom_endpoint_address: str | None = None  # a gateway or proxy in front of the namespace

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> EventHubsOptions:
        """Every key of ``table`` checked, or ConfigError naming the first wrong one."""
        no_unknown(table, where, KNOWN_KEYS)
        name = sink_name(table, where)
        credential = as_choice(table.get("credential", cls.credential), f"{where}.credential",
                               CREDENTIALS)
        mode = as_choice(table.get("mode", cls.mode), f"{where}.mode", MODES)
        transport = as_choice(table.get("transport", cls.transport), f"{where}.transport", TRANSPORTS)
        if "eventhub" not in table:
            raise ConfigError(f"{where}.eventhub: missing (the Event Hub's name)")
        hub = as_str(table["eventhub"], f"{where}.eventhub").strip()
        if not hub or "/" in hub or ";" in hub:
            raise ConfigError(f"{where}.eventhub: {hub!r} is not an Event Hub name")
        namespace = None
        if "fully_qualified_namespace" in table:
            namespace = _namespace(table["fully_qualified_namespace"],
                                   f"{where}.fully_qualified_namespace")
        elif credential != "connection-string":
            raise ConfigError(
                f"{where}.fully_qualified_namespace: missing (e.g. 'myns.servicebus.windows.net'; "
                f"required with credential = {credential!r})"
            )
        return cls(name=name, eventhub=hub, fully_qualified_namespace=namespace,
                   credential=credential, client_id=_client_id(table, credential, where),
                   mode=mode, transport=transport,
                   custom_endpoint_address=_endpoint(table, where),
                   **_connection_string_source(table, credential, where))


def _endpoint(table: Mapping[str, Any], where: str) -> str | None:
    """``custom_endpoint_address``: where the SDK connects instead of the namespace (AMQP over
    WebSockets through an application gateway or a relay); an https URL, plain http only on loopback."""
    if "custom_endpoint_address" not in table:
        return None
    at = f"{where}.custom_endpoint_address"
    url = as_http_url(table["custom_endpoint_address"], at)
    parts = urlsplit(url)
    if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        raise ConfigError(f"{at}: {url!r} must use https (TLS is required)")
    if parts.path or parts.query:
        raise ConfigError(f"{at}: {url!r}: give the scheme, host and port only")
    return url


def _client_id(table: Mapping[str, Any], credential: str, where: str) -> str | None:
    if "client_id" not in table:
        return None
    if credential == "connection-string":
        raise ConfigError(f"{where}.client_id: only for credential = managed-identity or default")
    client_id = as_str(table["client_id"], f"{where}.client_id").strip()
    if not client_id:
        raise ConfigError(f"{where}.client_id: must not be empty")
    return client_id


def _connection_string_source(table: Mapping[str, Any], credential: str, where: str) -> dict[str, str]:
    """``connection_string_env`` or ``connection_string_file``: exactly one with a connection
    string, neither otherwise."""
    sources = [k for k in ("connection_string_env", "connection_string_file") if k in table]
    if credential != "connection-string":
        if sources:
            raise ConfigError(f"{where}.{sources[0]}: only for credential = connection-string")
        return {}
    if len(sources) != 1:
        raise ConfigError(
            f"{where}.connection_string_env: give exactly one of connection_string_env or "
            "connection_string_file with credential = connection-string"
        )
    if "connection_string_env" in table:
        env = as_str(table["connection_string_env"], f"{where}.connection_string_env")
        if not _ENV_NAME.match(env):
            raise ConfigError(
                f"{where}.connection_string_env: {env!r} is not an environment variable name "
                "(give the variable's name, not the connection string)"
            )
        return {"connection_string_env": env}
    path = as_str(table["connection_string_file"], f"{where}.connection_string_file")
    if not path.strip():
        raise ConfigError(f"{where}.connection_string_file: must not be empty")
    return {"connection_string_file": str(Path(path).expanduser())}


def _namespace(value: Any, where: str) -> str:
    """``ns.servicebus.windows.net`` from that or ``sb://ns.servicebus.windows.net/``."""
    text = as_str(value, where).strip()
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme.lower() not in ("sb", "amqps"):
            raise ConfigError(f"{where}: {value!r} is not an Event Hubs namespace host")
    text = text.rstrip("/")
    if not text or any(c in text for c in "/;?@ ="):
        raise ConfigError(f"{where}: {value!r} is not a namespace host (e.g. 'myns.servicebus.windows.net')")
    return text
