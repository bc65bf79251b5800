"""Where an Event Hub is and how to sign in to an Azure service: ``[eventhub]`` of ``coordinator.toml``
(the agents' hub) and ``[azure.feed]`` (Azure's feed hub) are both read by ``load_eventhub``, with
``transport`` (``amqp``, or ``amqp-websockets``: AMQP over WebSockets on port 443, for networks
that let only HTTPS out) and ``custom_endpoint_address`` (where the SDK connects instead of the
namespace: an application gateway or relay; https, plain http only on loopback), as the agent's
eventhubs sink has them; each
service's ``credential``, ``client_id`` and ``connection_string_*`` keys by ``load_access``. Validated
once, one ConfigError naming the key per problem; a connection string is named by its variable or
file, never written here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ....errors import ConfigError
from ....validation import api_url, as_choice, as_str, no_unknown

CREDENTIALS = ("managed-identity", "default", "connection-string")
ACCESS_KEYS = ("credential", "client_id", "connection_string_env", "connection_string_file")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
TRANSPORTS = ("amqp", "amqp-websockets")  # as the agent's eventhubs sink has them
_CONSUMER_GROUP = re.compile(r"^(\$Default|[A-Za-z0-9][A-Za-z0-9._-]{0,49})\Z")
#: The consumer group the Bicep creates on both hubs (bicep/modules/eventhubs.bicep, azure-feed.bicep).
CONSUMER_GROUP = "coordinator"


@dataclass(frozen=True)
class Access:
    """How to sign in to one Azure service: a token credential, or a connection string."""

    credential: str = "managed-identity"
    client_id: str = ""
    connection_string_env: str = ""
    connection_string_file: str = ""


@dataclass(frozen=True)
class EventHubSettings:
    namespace: str
    eventhub: str
    consumer_group: str
    access: Access
    where: str = field(default="eventhub", compare=False)  # its section, in messages
    transport: str = "amqp"  # amqp (TCP 5671) | amqp-websockets (443: networks that let only HTTPS out)
    custom_endpoint_address: str = ""  # a gateway or relay in front of the namespace (https URL)

    @property
    def label(self) -> str:
        """``namespace/hub/consumer group``: what a snapshot names as the hub it covers."""
        return f"{self.namespace or '(connection string)'}/{self.eventhub}/{self.consumer_group}"


def path(value: Any, where: str) -> str:
    text = as_str(value, where).strip()
    if not text:
        raise ConfigError(f"{where}: must not be empty")
    return str(Path(text).expanduser())


def load_access(t: dict[str, Any], where: str) -> Access:
    credential = as_choice(t.get("credential", "managed-identity"), f"{where}.credential", CREDENTIALS)
    sources = [k for k in ("connection_string_env", "connection_string_file") if t.get(k)]
    if credential == "connection-string":
        if len(sources) != 1:
            raise ConfigError(f"{where}.connection_string_env: give exactly one of connection_string_env "
                              "or connection_string_file with credential = connection-string")
        if t.get("client_id"):
            raise ConfigError(f"{where}.client_id: only for credential = managed-identity or default")
    elif sources:
        raise ConfigError(f"{where}.{sources[0]}: only for credential = connection-string")
    env = as_str(t.get("connection_string_env", ""), f"{where}.connection_string_env").strip()
    if env and not _ENV.match(env):
        shown = "a connection string" if "=" in env or ";" in env else repr(env)  # never echo a secret
        raise ConfigError(f"{where}.connection_string_env: {shown} is not an environment variable name "
                          "(give the variable's name, not the connection string)")
    file = path(t["connection_string_file"], f"{where}.connection_string_file") \
        if t.get("connection_string_file") else ""
    return Access(credential, as_str(t.get("client_id", ""), f"{where}.client_id").strip(), env, file)


def load_eventhub(t: dict[str, Any], where: str = "eventhub", default_hub: str = "scheduled-events",
              ) -> EventHubSettings:
    no_unknown(t, where, ("fully_qualified_namespace", "eventhub", "consumer_group", "transport",
                          "custom_endpoint_address", *ACCESS_KEYS))
    access = load_access(t, where)
    namespace = as_str(t.get("fully_qualified_namespace", ""), f"{where}.fully_qualified_namespace").strip()
    namespace = namespace.split("://", 1)[-1].rstrip("/")
    if not namespace and access.credential != "connection-string":
        raise ConfigError(f"{where}.fully_qualified_namespace: missing (e.g. 'myns.servicebus.windows.net')")
    if namespace and any(c in namespace for c in "/;?@ ="):
        raise ConfigError(f"{where}.fully_qualified_namespace: {namespace!r} is not a namespace host")
    hub = as_str(t.get("eventhub", default_hub), f"{where}.eventhub").strip()
    if not hub or any(c in hub for c in "/;? "):
        raise ConfigError(f"{where}.eventhub: {hub!r} is not an Event Hub name")
    group = as_str(t.get("consumer_group", CONSUMER_GROUP), f"{where}.consumer_group").strip()
    if not _CONSUMER_GROUP.match(group):
        raise ConfigError(f"{where}.consumer_group: {group!r} is not a consumer group name")
    transport = as_choice(t.get("transport", "amqp"), f"{where}.transport", TRANSPORTS)
    return EventHubSettings(namespace, hub, group, access, where, transport, _endpoint(t, where))


def _endpoint(t: dict[str, Any], where: str) -> str:
    if "custom_endpoint_address" not in t:
        return ""
    at = f"{where}.custom_endpoint_address"
    url = api_url(t["custom_endpoint_address"], at)
    if urlsplit(url).path:
        raise ConfigError(f"{at}: {url!r}: give the scheme, host and port only")
    return url
