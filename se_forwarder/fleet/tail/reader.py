"""Reading the fleet's hub for ``fleet tail``: where the hub is, checkpoints, and the receiver.

Reads with ``EventHubConsumerClient`` (structured and binary CloudEvents both parse). With a blob
checkpoint store (``azure-eventhub-checkpointstoreblob``) several instances in one consumer group
share the partitions and resume where they left off. Azure packages are imported only when used.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, SeForwarderError, one_line
from ...sinks.azure_common import (
    MALFORMED_EVENTHUBS,
    check_plaintext,
    eventhubs_target,
    read_connection_string,
    scrub,
    token_credential,
)
from .table import FleetTable, Row

DEFAULT_EVENTHUB = "scheduled-events"
CHECKPOINT_EVERY = 1.0  # seconds between checkpoints of one partition
RECEIVE_WAIT = 0.2  # the SDK serves all partitions from one thread, waiting this long on each
CLIENT_RETRY: dict[str, Any] = {"retry_total": 2, "retry_backoff_factor": 0.2, "retry_backoff_max": 2}


def cloud_event_of(event_data: Any) -> dict[str, Any] | None:
    """The CloudEvent (as a structured-mode dict) in an ``EventData``, or None if it is not one."""
    from cloudevents.core.bindings.amqp import AMQPMessage, from_amqp
    from cloudevents.core.formats.json import JSONFormat

    def text(value: Any) -> Any:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    body = event_data.body
    if not isinstance(body, bytes | bytearray):
        try:
            body = b"".join(body)
        except TypeError:
            return None
    props = {text(k): text(v) for k, v in (event_data.properties or {}).items()}
    content_type = event_data.content_type
    if not content_type and bytes(body[:1]) == b"{" and "cloudEvents_id" not in props:
        content_type = "application/cloudevents+json"  # structured, from a producer that forgot it
    message = AMQPMessage(
        properties={"content-type": content_type} if content_type else {},
        application_properties=props,
        application_data=bytes(body),
    )
    fmt = JSONFormat()
    try:
        event = from_amqp(message, fmt)
        return json.loads(fmt.write(event))
    except Exception:  # anything else on the hub is skipped and counted, not fatal
        return None

@dataclass
class HubSource:
    """How to reach the hub: a connection string, or a namespace with a token credential."""

    eventhub: str
    connection_string: str | None = None
    namespace: str | None = None
    credential: str = "default"
    client_id: str | None = None

    def consumer(self, consumer_group: str, **kwargs: Any) -> Any:
        from azure.eventhub import EventHubConsumerClient

        if self.connection_string:
            return EventHubConsumerClient.from_connection_string(
                self.connection_string, consumer_group=consumer_group, eventhub_name=self.eventhub,
                **kwargs)
        assert self.namespace is not None  # hub_source gives one or the other
        return EventHubConsumerClient(
            fully_qualified_namespace=self.namespace, eventhub_name=self.eventhub,
            consumer_group=consumer_group, credential=token_credential(self.credential, self.client_id),
            **kwargs)

    @property
    def label(self) -> str:
        if self.namespace:
            return f"{self.namespace}/{self.eventhub}"
        return self.eventhub

    def scrub(self, text: str) -> str:
        return scrub(text, self.connection_string)

    def failure(self, exc: BaseException) -> SeForwarderError:
        """``cannot read Event Hub <label>: <why>``, without the connection string."""
        return SeForwarderError(f"cannot read Event Hub {self.label}: {self.scrub(one_line(str(exc)))}")


def hub_source(namespace: str | None, eventhub: str | None, credential: str, client_id: str | None,
               conn_env: str, conn_file: str | None) -> HubSource:
    """The hub named by ``fleet tail``'s options (ConfigError naming what is missing)."""
    if namespace:
        ns = namespace.split("://", 1)[-1].rstrip("/")
        return HubSource(eventhub or DEFAULT_EVENTHUB, namespace=ns, credential=credential,
                         client_id=client_id)
    try:
        conn = read_connection_string(conn_env, conn_file)
    except ConfigError as exc:
        raise ConfigError(f"--connection-string-file: {exc}") from None
    if not conn:
        raise ConfigError(
            f"no Event Hub to read: set the environment variable {conn_env} to a connection "
            "string, or give --connection-string-file, or --namespace (signed in with "
            "DefaultAzureCredential)"
        )
    try:
        host, entity = eventhubs_target(conn, key_name_required=False)
    except ConfigError:
        raise ConfigError(f"the Event Hubs {MALFORMED_EVENTHUBS}") from None
    check_plaintext(conn, f"the connection string in {conn_file or conn_env}")
    if entity and eventhub and entity != eventhub:
        raise ConfigError(f"--eventhub {eventhub!r}: the connection string is for hub {entity!r}")
    return HubSource(eventhub or entity or DEFAULT_EVENTHUB, connection_string=conn, namespace=host)


def checkpoint_store(account_url: str | None, conn_env: str | None, container: str) -> Any:
    """A BlobCheckpointStore (container created when missing), or None without options."""
    conn = read_connection_string(conn_env) if conn_env else None
    if conn_env and not conn:
        raise ConfigError(f"--checkpoint-connection-string-env: environment variable {conn_env} is not set")
    if not conn and not account_url:
        return None
    if conn:
        check_plaintext(conn, f"--checkpoint-connection-string-env {conn_env}")
    try:
        from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore
    except ImportError:
        raise SeForwarderError(
            "a checkpoint store needs azure-eventhub-checkpointstoreblob: pip install 'se-forwarder[fleet]'"
        ) from None
    if conn:
        try:
            store = BlobCheckpointStore.from_connection_string(conn, container)
        except ValueError as exc:
            raise ConfigError(
                f"--checkpoint-connection-string-env: {conn_env} does not hold a Storage connection "
                f"string: {scrub(one_line(str(exc)), conn)}"
            ) from None
    else:
        assert account_url is not None  # returned above when neither is given
        store = BlobCheckpointStore(account_url, container, credential=token_credential("default"))
    ensure_container(store)
    return store


def ensure_container(store: Any) -> None:
    """Create the checkpoint container when it is missing (fine if it exists or we may not)."""
    from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError

    try:
        store._container_client.create_container()
    except ResourceExistsError:
        pass
    except HttpResponseError as exc:
        if exc.status_code not in (403, 409):
            raise SeForwarderError(f"checkpoint container: {one_line(str(exc))}") from None
    except AzureError as exc:  # unreachable storage, TLS, credential: one line, not a traceback
        raise SeForwarderError(f"checkpoint container: {one_line(str(exc))}") from None


class Receiver:
    """The receiving side: callbacks from the SDK's threads, state for the main thread."""

    def __init__(self, table: FleetTable, on_change: Callable[[Row], None], checkpointing: bool) -> None:
        self.table = table
        self.on_change = on_change
        self.checkpointing = checkpointing
        self.owned: set[str] = set()
        self.idle: set[str] = set()
        self.last_event_at = time.monotonic()
        self.read_from: set[str] = set()
        self.last_sequence: dict[str, int] = {}
        self.errors: list[str] = []
        self._pending: dict[str, tuple[Any, Any]] = {}  # partition -> (context, event) unsaved
        self._saved_at: dict[str, float] = {}
        self.lock = threading.Lock()

    def on_event(self, context: Any, event: Any) -> None:
        pid = context.partition_id
        if event is None:  # max_wait_time passed without an event: this partition is caught up
            with self.lock:
                self.idle.add(pid)
            self._checkpoint(pid, force=False)
            return
        with self.lock:
            self.idle.discard(pid)
            self.last_event_at = time.monotonic()
            self.read_from.add(pid)
            self.last_sequence[pid] = max(self.last_sequence.get(pid, -1), event.sequence_number)
            if self.checkpointing:
                self._pending[pid] = (context, event)
        ce = cloud_event_of(event)
        if ce is None:
            self._skip()
        elif (row := self.table.add(ce)) is not None:
            self.on_change(row)
        self._checkpoint(pid, force=False)

    def _skip(self) -> None:
        with self.table.lock:
            self.table.events += 1
            self.table.skipped += 1

    def _checkpoint(self, pid: str, force: bool) -> None:
        if not self.checkpointing:
            return
        with self.lock:
            pending = self._pending.get(pid)
            if pending is None:
                return
            if not force and time.monotonic() - self._saved_at.get(pid, 0) < CHECKPOINT_EVERY:
                return
            del self._pending[pid]
            self._saved_at[pid] = time.monotonic()
        context, event = pending
        try:
            context.update_checkpoint(event)
        except Exception as exc:  # a lost checkpoint means re-reading a little, not failing
            self.errors.append(f"checkpoint of partition {pid} failed: {one_line(str(exc))}")

    def flush_checkpoints(self) -> None:
        for pid in list(self._pending):
            self._checkpoint(pid, force=True)

    def on_partition_initialize(self, context: Any) -> None:
        with self.lock:
            self.owned.add(context.partition_id)

    def on_partition_close(self, context: Any, reason: Any) -> None:
        self._checkpoint(context.partition_id, force=True)
        with self.lock:
            self.owned.discard(context.partition_id)

    def on_error(self, context: Any, error: Exception) -> None:
        where = f"partition {context.partition_id}" if context is not None else "load balancing"
        self.errors.append(f"{where}: {type(error).__name__}: {one_line(str(error))}")
