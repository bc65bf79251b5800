"""``fleet tail`` itself: read the hub, keep the table, print it live, as lines or as JSON."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ...errors import ConfigError, SeForwarderError
from ...sinks.azure_common import quiet_sdk_logs
from .reader import CLIENT_RETRY, RECEIVE_WAIT, HubSource, Receiver, checkpoint_store
from .table import FleetTable, Row

REDRAW_EVERY = 0.5
IDLE_AFTER = 1.0  # seconds without any event after which the hub counts as read (--once)
Echo = Callable[..., None]


def run_tail(
    source: HubSource,
    *,
    consumer_group: str,
    start: str,
    once: bool,
    duration: float | None,
    fmt: str,
    store_args: tuple[str | None, str | None, str],
    balance_interval: float,
    echo: Echo,
) -> int:
    """Read the hub until stopped (Ctrl-C), caught up (``once``) or ``duration`` passed, printing
    through ``echo`` (``click.echo``'s signature); the exit status."""
    try:
        import azure.eventhub  # noqa: F401
    except ImportError:
        raise SeForwarderError("fleet tail needs azure-eventhub: pip install 'se-forwarder[fleet]'") from None
    from azure.eventhub.exceptions import EventHubError

    quiet_sdk_logs()
    store = checkpoint_store(*store_args)
    if once and store is not None:
        raise ConfigError("--once reads every partition; with a checkpoint store use --duration")
    kwargs: dict[str, Any] = {**CLIENT_RETRY}
    if store is not None:
        kwargs.update(checkpoint_store=store, load_balancing_interval=balance_interval)
    try:
        client = source.consumer(consumer_group, **kwargs)
    except ValueError as exc:  # the SDK's verdict on a malformed connection string or namespace
        raise source.failure(exc) from None
    try:
        partitions = client.get_partition_ids()  # also proves the hub is reachable
        ends = _ends(client, partitions) if once and start == "earliest" else None
    except EventHubError as exc:
        client.close()
        raise source.failure(exc) from None

    table = FleetTable()
    live = fmt == "table" and not once and duration is None and sys.stdout.isatty()
    streaming = not once and duration is None
    state = Receiver(table, _printer(fmt, streaming and not live, echo), checkpointing=store is not None)
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
                echo(f"se-forwarder: {source.scrub(line)}", err=True)
            shown_errors = len(state.errors)
            if live:
                _redraw(table, source, began, echo)
            if duration is not None and time.monotonic() - began >= duration:
                break
            if once and _caught_up(partitions, state, ends):
                break
    except KeyboardInterrupt:
        pass
    finally:
        state.flush_checkpoints()
        owned = sorted(state.owned, key=_partition_order)
        client.close()
        worker.join(timeout=10)
    if fmt == "json" and not streaming:
        echo(
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
            _redraw(table, source, began, echo)
        else:
            echo(table.render())
    return 0


def _partition_order(pid: str) -> tuple[int, str]:
    return (int(pid), pid) if pid.isdigit() else (1 << 30, pid)


def _ends(client: Any, partitions: list[str]) -> dict[str, int]:
    """The sequence number of the last event each non-empty partition holds now."""
    ends: dict[str, int] = {}
    for pid in partitions:
        props = client.get_partition_properties(pid)
        if not props["is_empty"]:
            ends[pid] = int(props["last_enqueued_sequence_number"])
    return ends


def _caught_up(partitions: list[str], state: Receiver, ends: dict[str, int] | None) -> bool:
    """Read from the earliest (``ends``): every event each partition held when the command started
    was read, however slowly the hub hands them over. From the latest: every partition came up
    empty after its last event, and none had one for IDLE_AFTER s."""
    with state.lock:
        if ends is not None:
            return all(state.last_sequence.get(pid, -1) >= end for pid, end in ends.items())
        quiet = time.monotonic() - state.last_event_at >= IDLE_AFTER
        return quiet and all(pid in state.idle for pid in partitions)


def _printer(fmt: str, streaming: bool, echo: Echo) -> Callable[[Row], None]:
    """What to print when a row appears or gains a VM (only when streaming to a pipe/file)."""

    def quiet(_row: Row) -> None:
        return None

    def as_json(row: Row) -> None:
        echo(json.dumps(row.as_json()))

    def as_line(row: Row) -> None:
        when = row.first_seen[:19].replace("T", " ")
        echo(f"{when}  {row.state:<16}  {row.eventtype:<10}  {row.subject}  vms={len(row.sources)}")

    if not streaming:
        return quiet
    return as_json if fmt == "json" else as_line


def _redraw(table: FleetTable, source: HubSource, began: float, echo: Echo) -> None:
    """Repaint the terminal (at most every REDRAW_EVERY seconds)."""
    now = time.monotonic()
    if now - getattr(_redraw, "_last", 0.0) < REDRAW_EVERY:
        return
    _redraw._last = now  # type: ignore[attr-defined]
    header = f"se-forwarder fleet tail: {source.label}  ({int(now - began)} s, Ctrl-C to stop)"
    echo("\x1b[H\x1b[2J" + header + "\n\n" + table.render(), nl=True)
