"""`se-forwarder fleet tail`: a live table of scheduled events across the fleet, from Event Hubs.

Every VM's agent publishes its CloudEvents to one hub (partition key = vmId). The same platform event
seen by several VMs arrives once per VM with the same ``subject`` (EventId) and ``type`` and a
different ``source``; the table shows it once, with how many VMs saw it.

Reads with ``EventHubConsumerClient`` (structured and binary CloudEvents both parse). With a blob
checkpoint store (``azure-eventhub-checkpointstoreblob``) several instances in one consumer group
share the partitions and resume where they left off. Azure packages are imported only when the
command runs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from ..errors import ConfigError, SeForwarderError

DEFAULT_EVENTHUB = "scheduled-events"
STATE_ORDER = {"scheduled": 0, "approved": 1, "started": 2, "completed": 3, "canceled": 4}
CHECKPOINT_EVERY = 1.0  # seconds between checkpoints of one partition
REDRAW_EVERY = 0.5
IDLE_AFTER = 1.0  # seconds without any event after which the hub counts as read (--once)
RECEIVE_WAIT = 0.2  # the SDK serves all partitions from one thread, waiting this long on each
CLIENT_RETRY: dict[str, Any] = {"retry_total": 2, "retry_backoff_factor": 0.2, "retry_backoff_max": 2}


# --------------------------------------------------------------------------------------------------
# the table (no Azure in here)
# --------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One event of the fleet: a (subject, type) pair, however many VMs reported it."""

    subject: str
    ce_type: str
    eventtype: str = ""
    first_seen: str = ""
    not_before: str | None = None
    sources: set[str] = field(default_factory=set)

    @property
    def state(self) -> str:
        return self.ce_type.rsplit(".", 1)[-1]

    def as_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "type": self.ce_type,
            "state": self.state,
            "eventtype": self.eventtype,
            "first_seen": self.first_seen,
            "not_before": self.not_before,
            "vms": len(self.sources),
            "sources": sorted(self.sources),
        }


HEARTBEAT_TYPE = "com.azure.scheduledevents.heartbeat"


class FleetTable:
    """CloudEvents deduplicated by (subject, type), counting the distinct sources (VMs)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Row] = {}
        self.events = 0
        self.skipped = 0
        self.lock = threading.Lock()

    def add(self, event: dict[str, Any]) -> Row | None:
        """Record one CloudEvent; the row when it is new or gained a VM, else None."""
        subject, ce_type, source = event.get("subject"), event.get("type"), event.get("source")
        with self.lock:
            self.events += 1
            if not subject or not ce_type or not source:
                self.skipped += 1
                return None
            if ce_type == HEARTBEAT_TYPE:
                return None  # a sign of life from an agent, not an event of the fleet
            key = (str(subject), str(ce_type))
            row = self.rows.get(key)
            if row is None:
                data = event.get("data") if isinstance(event.get("data"), dict) else {}
                row = Row(
                    subject=key[0],
                    ce_type=key[1],
                    eventtype=str(event.get("eventtype") or data.get("EventType") or ""),
                    first_seen=str(event.get("time") or ""),
                    not_before=data.get("NotBeforeUtc"),
                )
                self.rows[key] = row
            elif event.get("time") and str(event["time"]) < row.first_seen:
                row.first_seen = str(event["time"])
            if source in row.sources:
                return None
            row.sources.add(str(source))
            return row

    def sorted_rows(self) -> list[Row]:
        with self.lock:
            rows = list(self.rows.values())
        return sorted(rows, key=lambda r: (r.first_seen, r.subject, STATE_ORDER.get(r.state, 9)))

    def render(self) -> str:
        """The whole table as text."""
        lines = [_row_text("FIRST SEEN", "STATE", "TYPE", "EVENT ID", "VMS", "NOT BEFORE")]
        for row in self.sorted_rows():
            lines.append(
                _row_text(
                    row.first_seen[:19].replace("T", " "),
                    row.state,
                    row.eventtype,
                    row.subject,
                    str(len(row.sources)),
                    row.not_before or "-",
                )
            )
        count, messages = len(self.rows), self.events
        lines.append(
            f"{count} event{'' if count == 1 else 's'} from {messages} message{'' if messages == 1 else 's'}"
            + self._skipped_text()
        )
        return "\n".join(lines)

    def _skipped_text(self) -> str:
        return f" ({self.skipped} were not CloudEvents)" if self.skipped else ""


def _row_text(first: str, state: str, kind: str, subject: str, vms: str, not_before: str) -> str:
    return f"{first:<19}  {state:<16}  {kind:<10}  {subject:<38}  {vms:>3}  {not_before}"


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


# --------------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------------


@dataclass
class _Source:
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
                self.connection_string,
                consumer_group=consumer_group,
                eventhub_name=self.eventhub,
                **kwargs,
            )
        return EventHubConsumerClient(
            fully_qualified_namespace=self.namespace,
            eventhub_name=self.eventhub,
            consumer_group=consumer_group,
            credential=_token_credential(self.credential, self.client_id),
            **kwargs,
        )

    @property
    def label(self) -> str:
        if self.namespace:
            return f"{self.namespace}/{self.eventhub}"
        return self.eventhub


def _token_credential(kind: str, client_id: str | None) -> Any:
    if kind == "managed-identity":
        from azure.identity import ManagedIdentityCredential

        return ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()
    from azure.identity import DefaultAzureCredential

    if client_id:
        return DefaultAzureCredential(managed_identity_client_id=client_id)
    return DefaultAzureCredential()


def _read_secret(env: str | None, path: str | None, what: str) -> str | None:
    """A connection string from a file (when given) or an environment variable (when set)."""
    if path:
        try:
            value = Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
        if not value:
            raise ConfigError(f"{what}: {path} is empty")
        return value
    if env:
        return os.environ.get(env, "").strip() or None
    return None


def _settings(conn: str) -> dict[str, str]:
    out = {}
    for part in conn.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def _source(
    namespace: str | None,
    eventhub: str | None,
    credential: str,
    client_id: str | None,
    conn_env: str,
    conn_file: str | None,
) -> _Source:
    if namespace:
        ns = namespace.split("://", 1)[-1].rstrip("/")
        return _Source(eventhub or DEFAULT_EVENTHUB, namespace=ns, credential=credential, client_id=client_id)
    conn = _read_secret(conn_env, conn_file, "--connection-string-file")
    if not conn:
        raise ConfigError(
            f"no Event Hub to read: set the environment variable {conn_env} to a connection "
            "string, or give --connection-string-file, or --namespace (signed in with "
            "DefaultAzureCredential)"
        )
    settings = _settings(conn)
    if not settings.get("endpoint", "").lower().startswith("sb://"):
        raise ConfigError(
            "the Event Hubs connection string is malformed (needs Endpoint=sb://...;"
            "SharedAccessKeyName=...;SharedAccessKey=...)"
        )
    entity = settings.get("entitypath")
    hub = eventhub or entity or DEFAULT_EVENTHUB
    if entity and eventhub and entity != eventhub:
        raise ConfigError(f"--eventhub {eventhub!r}: the connection string is for hub {entity!r}")
    host = settings["endpoint"][len("sb://") :].strip("/")
    return _Source(hub, connection_string=conn, namespace=host)


def _checkpoint_store(account_url: str | None, conn_env: str | None, container: str) -> Any:
    """A BlobCheckpointStore (container created when missing), or None without options."""
    conn = _read_secret(conn_env, None, "--checkpoint-connection-string-env") if conn_env else None
    if conn_env and not conn:
        raise ConfigError(f"--checkpoint-connection-string-env: environment variable {conn_env} is not set")
    if not conn and not account_url:
        return None
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
                f"string: {_scrub(_first_line(str(exc)), conn)}"
            ) from None
    else:
        from azure.identity import DefaultAzureCredential

        store = BlobCheckpointStore(account_url, container, credential=DefaultAzureCredential())
    _ensure_container(store)
    return store


def _ensure_container(store: Any) -> None:
    """Create the checkpoint container when it is missing (fine if it exists or we may not)."""
    from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError

    try:
        store._container_client.create_container()
    except ResourceExistsError:
        pass
    except HttpResponseError as exc:
        if exc.status_code not in (403, 409):
            raise SeForwarderError(f"checkpoint container: {_first_line(str(exc))}") from None
    except AzureError as exc:  # unreachable storage, TLS, credential: one line, not a traceback
        raise SeForwarderError(f"checkpoint container: {_first_line(str(exc))}") from None


def _first_line(text: str) -> str:
    """The SDK's multi-line error text as one line (shared with the sink)."""
    from ..sinks.eventhubs import one_line

    return one_line(text)


def _scrub(text: str, secret: str | None) -> str:
    from ..sinks.eventhubs import scrub

    return scrub(text, secret)


@click.command("tail")
@click.option(
    "--connection-string-env",
    default="EH_CONN",
    show_default=True,
    help="Environment variable holding an Event Hubs connection string (listen rights).",
)
@click.option(
    "--connection-string-file",
    type=click.Path(dir_okay=False),
    help="File holding an Event Hubs connection string.",
)
@click.option(
    "--namespace",
    help="Fully qualified namespace (ns.servicebus.windows.net), signed in with an Entra credential "
    "instead of a connection string.",
)
@click.option(
    "--eventhub", help=f"Event Hub name (default: the connection string's, else {DEFAULT_EVENTHUB})."
)
@click.option(
    "--credential",
    type=click.Choice(["default", "managed-identity"]),
    default="default",
    show_default=True,
    help="Credential for --namespace.",
)
@click.option("--client-id", help="Client id of a user-assigned managed identity.")
@click.option("--consumer-group", default="$Default", show_default=True)
@click.option(
    "--from",
    "start",
    type=click.Choice(["latest", "earliest"]),
    default=None,
    help="Where to start in partitions without a checkpoint (default: latest; earliest with --once).",
)
@click.option(
    "--once",
    is_flag=True,
    help="Read until every partition is quiet for a second, print the table and exit.",
)
@click.option("--duration", type=click.FloatRange(min=0.1), help="Stop after this many seconds.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: one JSON object per new row or new VM, or one summary with --once/--duration.",
)
@click.option(
    "--checkpoint-connection-string-env",
    help="Environment variable with a Storage connection string: checkpoints in blobs, so several "
    "instances share the partitions.",
)
@click.option(
    "--checkpoint-account-url",
    help="https://<account>.blob.core.windows.net for checkpoints, signed in with DefaultAzureCredential.",
)
@click.option("--checkpoint-container", default="se-forwarder-checkpoints", show_default=True)
@click.option(
    "--balance-interval",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds between partition load-balancing rounds (with a checkpoint store).",
)
def tail_command(
    connection_string_env: str,
    connection_string_file: str | None,
    namespace: str | None,
    eventhub: str | None,
    credential: str,
    client_id: str | None,
    consumer_group: str,
    start: str | None,
    once: bool,
    duration: float | None,
    fmt: str,
    checkpoint_connection_string_env: str | None,
    checkpoint_account_url: str | None,
    checkpoint_container: str,
    balance_interval: float,
) -> None:
    """Live table of events across the fleet: each event once, with how many VMs saw it."""
    try:
        code = _tail(
            _source(
                namespace, eventhub, credential, client_id, connection_string_env, connection_string_file
            ),
            consumer_group=consumer_group,
            start=start or ("earliest" if once else "latest"),
            once=once,
            duration=duration,
            fmt=fmt,
            store_args=(checkpoint_account_url, checkpoint_connection_string_env, checkpoint_container),
            balance_interval=balance_interval,
        )
    except SeForwarderError as exc:
        click.echo(f"se-forwarder: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code)


class _Tail:
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
        row = self.table.add(ce) if ce is not None else self._skip()
        if row is not None:
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
            self.errors.append(f"checkpoint of partition {pid} failed: {_first_line(str(exc))}")

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
        self.errors.append(f"{where}: {type(error).__name__}: {_first_line(str(error))}")


def _tail(
    source: _Source,
    *,
    consumer_group: str,
    start: str,
    once: bool,
    duration: float | None,
    fmt: str,
    store_args: tuple[str | None, str | None, str],
    balance_interval: float,
) -> int:
    try:
        import azure.eventhub  # noqa: F401
    except ImportError:
        raise SeForwarderError("fleet tail needs azure-eventhub: pip install 'se-forwarder[fleet]'") from None
    from azure.eventhub.exceptions import EventHubError

    from ..sinks.eventhubs import _quiet_azure_logs

    _quiet_azure_logs()
    store = _checkpoint_store(*store_args)
    if once and store is not None:
        raise ConfigError("--once reads every partition; with a checkpoint store use --duration")
    kwargs: dict[str, Any] = {**CLIENT_RETRY}
    if store is not None:
        kwargs.update(checkpoint_store=store, load_balancing_interval=balance_interval)
    try:
        client = source.consumer(consumer_group, **kwargs)
    except ValueError as exc:  # the SDK's verdict on a malformed connection string or namespace
        raise SeForwarderError(
            f"cannot read Event Hub {source.label}: {_scrub(_first_line(str(exc)), source.connection_string)}"
        ) from None
    try:
        partitions = client.get_partition_ids()  # also proves the hub is reachable
    except EventHubError as exc:
        client.close()
        raise SeForwarderError(
            f"cannot read Event Hub {source.label}: {_scrub(_first_line(str(exc)), source.connection_string)}"
        ) from None

    table = FleetTable()
    live = fmt == "table" and not once and duration is None and sys.stdout.isatty()
    streaming = not once and duration is None
    state = _Tail(table, _printer(fmt, streaming and not live), checkpointing=store is not None)
    worker = threading.Thread(
        target=client.receive,
        kwargs={
            "on_event": state.on_event,
            "on_error": state.on_error,
            "on_partition_initialize": state.on_partition_initialize,
            "on_partition_close": state.on_partition_close,
            "starting_position": "-1" if start == "earliest" else "@latest",
            "max_wait_time": RECEIVE_WAIT,
        },
        name="fleet-tail",
        daemon=True,
    )
    worker.start()
    began = time.monotonic()
    shown_errors = 0
    try:
        while worker.is_alive():
            time.sleep(0.1)
            for line in state.errors[shown_errors:]:
                click.echo(f"se-forwarder: {_scrub(line, source.connection_string)}", err=True)
            shown_errors = len(state.errors)
            if live:
                _redraw(table, source, began)
            if duration is not None and time.monotonic() - began >= duration:
                break
            if once and _caught_up(partitions, state):
                break
    except KeyboardInterrupt:
        pass
    finally:
        state.flush_checkpoints()
        owned = sorted(state.owned, key=_partition_order)
        client.close()
        worker.join(timeout=10)
    if fmt == "json" and not streaming:
        click.echo(
            json.dumps(
                {
                    "eventhub": source.label,
                    "events": table.events,
                    "skipped": table.skipped,
                    "partitions_owned": owned,
                    "partitions_read": sorted(state.read_from, key=_partition_order),
                    "rows": [row.as_json() for row in table.sorted_rows()],
                }
            )
        )
    elif fmt == "table":
        if live:
            _redraw(table, source, began)
        else:
            click.echo(table.render())
    return 0


def _partition_order(pid: str) -> tuple[int, str]:
    return (int(pid), pid) if pid.isdigit() else (1 << 30, pid)


def _caught_up(partitions: list[str], state: _Tail) -> bool:
    """Every partition came up empty after its last event, and none had one for IDLE_AFTER s."""
    with state.lock:
        quiet = time.monotonic() - state.last_event_at >= IDLE_AFTER
        return quiet and all(pid in state.idle for pid in partitions)


def _printer(fmt: str, streaming: bool) -> Callable[[Row], None]:
    """What to print when a row appears or gains a VM (only when streaming to a pipe/file)."""

    def quiet(_row: Row) -> None:
        return None

    def as_json(row: Row) -> None:
        click.echo(json.dumps(row.as_json()))

    def as_line(row: Row) -> None:
        when = row.first_seen[:19].replace("T", " ")
        click.echo(f"{when}  {row.state:<16}  {row.eventtype:<10}  {row.subject}  vms={len(row.sources)}")

    if not streaming:
        return quiet
    return as_json if fmt == "json" else as_line


def _redraw(table: FleetTable, source: _Source, began: float) -> None:
    """Repaint the terminal (at most every REDRAW_EVERY seconds)."""
    now = time.monotonic()
    if now - getattr(_redraw, "_last", 0.0) < REDRAW_EVERY:
        return
    _redraw._last = now  # type: ignore[attr-defined]
    header = f"se-forwarder fleet tail: {source.label}  ({int(now - began)} s, Ctrl-C to stop)"
    click.echo("\x1b[H\x1b[2J" + header + "\n\n" + table.render(), nl=True)
