"""``[azure]`` of ``coordinator.toml``: Azure's own feed as a second input. Validated once, one line per
problem. Without the section the coordinator reads the agents only, as before::

    [azure]
    subscriptions = ["00000000-0000-0000-0000-000000000000"]   # the managed subscriptions (required)
    arm_endpoint = "https://management.azure.com"  # ARM (Resource Graph, acknowledge, instance views)
    ca_file = ""                         # a PEM bundle to trust instead of the system's (tests, private
                                         # clouds); TLS is verified either way, and http is refused
    arg_interval = "5m"                  # the Resource Graph catch-up: at start and this often (5s..1d)
    acknowledge = false                  # true: approve through the Maintenance acknowledge when no
                                         # affected VM has a watched agent (the identity needs the role)
    credential = "managed-identity"      # managed-identity | default (ARM takes a token)
    client_id = ""                       # a user-assigned identity's client id

    [azure.feed]                         # optional: the Azure feed hub (Event Grid's system topic
                                         # delivers to it); the keys of [eventhub]
    fully_qualified_namespace = "ns.servicebus.windows.net"
    eventhub = "azure-feed"
    consumer_group = "coordinator"
    credential = "managed-identity"

Azure's view of a subscription counts as fresh (azure_topology.watched) for
``max(2 x arg_interval, 60 s)`` after its last complete catch-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ....errors import ConfigError
from ....validation import as_bool, as_str, no_unknown
from .hub import EventHubSettings, load_eventhub
from .policy import parse_duration

ARM = "https://management.azure.com"
KEYS = ("subscriptions", "arm_endpoint", "ca_file", "arg_interval", "acknowledge", "credential", "client_id",
        "feed")
CREDENTIALS = ("managed-identity", "default")
_GUID = re.compile(r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\Z")


@dataclass(frozen=True)
class AzureSettings:
    subscriptions: tuple[str, ...]  # lower case
    feed: EventHubSettings | None = None  # [azure.feed]; None: no live feed, the catch-up only
    arm_endpoint: str = ARM
    ca_file: str = ""
    arg_interval: float = 300.0
    acknowledge: bool = False
    credential: str = "managed-identity"
    client_id: str = ""
    shard: frozenset[str] = frozenset()  # [shard] subscriptions: other shards' feed events are skipped

    @property
    def fresh_for(self) -> float:
        """How long a complete catch-up keeps Azure's view of a subscription fresh."""
        return max(2 * self.arg_interval, 60.0)

    @property
    def scope(self) -> str:
        """The token scope for ARM: its endpoint's (``https://management.azure.com/.default``)."""
        return f"{self.arm_endpoint}/.default"

    @property
    def verify(self) -> str | bool:
        """``connection_verify`` for the SDK: the CA bundle, or True (the system's roots)."""
        return self.ca_file or True


def load_azure(raw: Any) -> AzureSettings | None:
    """``[azure]`` (module docstring); None when the section is absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("azure: must be a table ([azure])")
    no_unknown(raw, "azure", KEYS)
    listed = raw.get("subscriptions")
    if not isinstance(listed, list) or not listed:
        raise ConfigError("azure.subscriptions: give the managed subscription ids, e.g. "
                          "[\"00000000-0000-0000-0000-000000000000\"]")
    for i, sub in enumerate(listed):
        if not isinstance(sub, str) or not _GUID.match(sub.strip()):
            raise ConfigError(f"azure.subscriptions[{i}]: {str(sub)[:60]!r} is not a subscription id "
                              "(a GUID)")
    credential = as_str(raw.get("credential", "managed-identity"), "azure.credential").strip()
    if credential not in CREDENTIALS:
        raise ConfigError(f"azure.credential: {credential!r} must be managed-identity or default (ARM takes "
                          "a token, not a connection string)")
    feed = raw.get("feed")
    if feed is not None and not isinstance(feed, dict):
        raise ConfigError("azure.feed: must be a table ([azure.feed])")
    return AzureSettings(
        subscriptions=tuple(dict.fromkeys(s.strip().lower() for s in listed)),
        feed=load_eventhub(feed, "azure.feed", "azure-feed") if feed is not None else None,
        arm_endpoint=_endpoint(raw.get("arm_endpoint", ARM)), ca_file=_ca_file(raw.get("ca_file", "")),
        arg_interval=parse_duration(raw["arg_interval"], "azure.arg_interval", 5.0, 86400.0)
        if "arg_interval" in raw else 300.0,
        acknowledge=as_bool(raw.get("acknowledge", False), "azure.acknowledge"),
        credential=credential, client_id=as_str(raw.get("client_id", ""), "azure.client_id").strip())


def _endpoint(value: Any) -> str:
    text = as_str(value, "azure.arm_endpoint").strip().rstrip("/")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ConfigError(f"azure.arm_endpoint: {text[:100]!r} is not a URL") from None
    if parts.scheme != "https":
        raise ConfigError(f"azure.arm_endpoint: {text[:100]!r} must be https:// (TLS is always verified)")
    if not parts.hostname or parts.path or parts.query or parts.fragment or parts.username:
        raise ConfigError(f"azure.arm_endpoint: {text[:100]!r} must be https://host[:port] and nothing more")
    return text


def _ca_file(value: Any) -> str:
    text = as_str(value, "azure.ca_file").strip()
    if not text:
        return ""
    path = Path(text).expanduser()
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"azure.ca_file: {path} cannot be read ({exc.strerror or exc})") from None
    if b"-----BEGIN CERTIFICATE-----" not in body:
        raise ConfigError(f"azure.ca_file: {path} holds no PEM certificate")
    return str(path)
