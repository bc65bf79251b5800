"""Clients for the Azure services the coordinator uses, signed in as its configuration says.

Token credentials (managed identity, or DefaultAzureCredential) or a connection string read from an
environment variable or a file at start, as the agent reads its own (``sinks/azure_common.py``),
with the same rule: plaintext (an emulator's connection string, ``http``) only to a loopback host.
Connection strings are registered with the log scrubber and never appear in a message. The Azure
SDKs are imported here, only when the service runs.

``Clients`` is where the service gets these clients from: ``AZURE`` (the functions below, from the
configuration's sections) unless code hands it stand-ins with the same interface, as the fleet demo
does with its in-process hub, queues and container (``se_forwarder/demo/transport/``). No key of
``coordinator.toml`` selects anything but ``AZURE``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ....errors import ConfigError
from ....sinks.azure_common import check_plaintext, eventhubs_target, read_connection_string, token_credential
from ....telemetry import add_secrets
from ..config.azure import AzureSettings
from ..config.service import Access, EventHubSettings, QueueSettings, ServiceSettings, StorageSettings

# Few, short SDK retries: the service has its own loops, and a down service must fail fast.
EVENTHUB_RETRY: dict[str, Any] = {"retry_total": 2, "retry_backoff_factor": 0.2, "retry_backoff_max": 2}


def connection_string(access: Access, where: str) -> str | None:
    """The connection string ``access`` names (None for a token credential); ConfigError naming the
    key when it is unset, unreadable, or would go in plaintext to a host that is not loopback."""
    if access.credential != "connection-string":
        return None
    key = f"{where}.connection_string_{'file' if access.connection_string_file else 'env'}"
    try:
        value = read_connection_string(access.connection_string_env, access.connection_string_file)
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if value is None:
        raise ConfigError(f"{key}: environment variable {access.connection_string_env} is not set")
    add_secrets([value])
    check_plaintext(value, key)
    return value


def check_connection_strings(settings: ServiceSettings) -> None:
    """Read every connection string the configuration names, before any client is made: the
    checks of ``connection_string`` as one line at start rather than a failing part later."""
    connection_string(settings.eventhub.access, "eventhub")
    connection_string(settings.storage.access, "storage")
    connection_string(settings.queues.access, "queues")
    if settings.azure is not None and settings.azure.feed is not None:
        connection_string(settings.azure.feed.access, "azure.feed")


def signing_key(settings: ServiceSettings) -> Any:
    """What the signer signs with (signer.py): the key file's path, or the key read from Key Vault."""
    if settings.key_vault is None:
        return settings.key_file
    from .keyvault import signing_key as from_vault

    return from_vault(settings.key_vault)


def azure_credential(settings: AzureSettings) -> Any:
    """The credential for ARM (``[azure] credential``)."""
    return credential(Access(settings.credential, settings.client_id))


def credential(access: Access) -> Any:
    """ManagedIdentityCredential or DefaultAzureCredential (with a user-assigned client id if given)."""
    try:
        return token_credential(access.credential, access.client_id or None)
    except ImportError:
        raise ConfigError("the coordinator needs azure-identity: pip install 'se-forwarder[fleet]'") from None


def _hub_connection(settings: EventHubSettings) -> str | None:
    where = settings.where
    conn = connection_string(settings.access, where)
    if conn is None:
        return None
    try:
        _, entity = eventhubs_target(conn, key_name_required=False)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if entity and entity != settings.eventhub:
        raise ConfigError(f"{where}.eventhub: the connection string is for Event Hub {entity!r}, "
                          f"not {settings.eventhub!r}")
    return conn


def _transport(settings: EventHubSettings) -> dict[str, Any]:
    """The SDK's options for ``transport`` and ``custom_endpoint_address`` (config/hub.py)."""
    from azure.eventhub import TransportType

    options: dict[str, Any] = {}
    if settings.transport == "amqp-websockets":  # port 443; needs websocket-client (the fleet extra)
        options["transport_type"] = TransportType.AmqpOverWebsocket
    if settings.custom_endpoint_address:
        options["custom_endpoint_address"] = settings.custom_endpoint_address
    return options


def consumer(settings: EventHubSettings, **kwargs: Any) -> Any:
    """An ``EventHubConsumerClient`` for the coordinator's consumer group."""
    from azure.eventhub import EventHubConsumerClient

    from .... import __version__

    common: dict[str, Any] = {"user_agent": f"se-forwarder-coordinator/{__version__}",
                              **EVENTHUB_RETRY, **_transport(settings), **kwargs}
    conn = _hub_connection(settings)
    if conn is not None:
        return EventHubConsumerClient.from_connection_string(
            conn, consumer_group=settings.consumer_group, eventhub_name=settings.eventhub, **common)
    return EventHubConsumerClient(
        fully_qualified_namespace=settings.namespace, eventhub_name=settings.eventhub,
        consumer_group=settings.consumer_group, credential=credential(settings.access), **common)


def producer(settings: EventHubSettings) -> Any:
    """An ``EventHubProducerClient`` for publishing decisions (one, kept for the service's life)."""
    from azure.eventhub import EventHubProducerClient

    from .... import __version__

    common: dict[str, Any] = {"user_agent": f"se-forwarder-coordinator/{__version__}", **EVENTHUB_RETRY,
                              **_transport(settings)}
    conn = _hub_connection(settings)
    if conn is not None:
        return EventHubProducerClient.from_connection_string(conn, eventhub_name=settings.eventhub, **common)
    return EventHubProducerClient(fully_qualified_namespace=settings.namespace,
                                  eventhub_name=settings.eventhub,
                                  credential=credential(settings.access), **common)


def container(settings: StorageSettings) -> Any:
    """A ``ContainerClient`` for the lease and snapshot blobs (not created here)."""
    try:
        from azure.storage.blob import ContainerClient
    except ImportError:
        raise ConfigError("the coordinator needs azure-storage-blob: pip install 'se-forwarder[fleet]'") \
            from None
    options: dict[str, Any] = {"connection_timeout": 5, "read_timeout": 20, "retry_total": 1}
    conn = connection_string(settings.access, "storage")
    try:
        if conn is not None:
            return ContainerClient.from_connection_string(conn, settings.container, **options)
        return ContainerClient(settings.account_url, settings.container,
                               credential=credential(settings.access), **options)
    except ValueError:
        raise ConfigError("storage: the Storage connection string is not valid") from None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


class Queues:
    """``QueueClient``s for the agents' queues, made once per queue and kept (bounded)."""

    MAX_CLIENTS = 2048

    def __init__(self, settings: QueueSettings) -> None:
        # Found, not imported: the SDK (about 0.3 s of imports) loads with the first message sent,
        # so a start does not wait for it, yet a missing SDK is still named at once.
        if not _installed("azure.storage.queue"):
            raise ConfigError("the coordinator needs azure-storage-queue: "
                              "pip install 'se-forwarder[fleet]'")
        from ....approvals.queue.client import make_client

        self.settings = settings
        self._make = make_client
        self._conn = connection_string(settings.access, "queues")
        self._credential = None if self._conn else credential(settings.access)
        self._clients: dict[str, Any] = {}

    def client(self, name: str) -> Any:
        found = self._clients.get(name)
        if found is None:
            if len(self._clients) >= self.MAX_CLIENTS:
                self._clients.pop(next(iter(self._clients))).close()
            try:
                found = self._make(name, connection_string=self._conn, account_url=self.settings.account_url,
                                   credential=self._credential)
            except ValueError:
                raise ConfigError("queues: the Storage connection string is not valid") from None
            self._clients[name] = found
        return found

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


@dataclass(frozen=True)
class Clients:
    """The makers of the service's clients (module docstring): an ``EventHubConsumerClient``
    (``consumer(settings, **options)``), an ``EventHubProducerClient``, the blob ``ContainerClient``
    and the approval queues' ``Queues`` (``client(name)``, ``close()``)."""

    consumer: Callable[..., Any]
    producer: Callable[[EventHubSettings], Any]
    container: Callable[[StorageSettings], Any]
    queues: Callable[[QueueSettings], Any]


AZURE = Clients(consumer, producer, container, Queues)
