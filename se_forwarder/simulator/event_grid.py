"""Azure's live feed: Event Grid's ``ScheduledEventEmitted`` CloudEvents, published to an Event Hub.

For every change Azure sees (``azure_ledger.py``: each status through Completed and Canceled),
``cloud_event`` builds the CloudEvent the ``Microsoft.ResourceNotifications.MaintenanceResources``
system topic delivers, in CloudEvents 1.0 schema (``docs/azure-feed.md``)::

    {"specversion": "1.0", "id": <uuid>, "source": "/subscriptions/<sub>",
     "subject": <the scheduled event's ARM id>, "type": EVENT_TYPE or WRITE_TYPE, "time": <RFC 3339>,
     "data": {"resourceInfo": {"id", "name": <EventId>, "type", "location",
                               "properties": {<the scheduled event's fields>}},
              "operationalInfo": {"resourceEventTime": <RFC 3339>}, "apiVersion": DATA_API_VERSION}}

Microsoft's page spells the type two ways: its sample's ``EVENT_TYPE`` and its field table's
``WRITE_TYPE`` ("All scheduled events have the same event type"). The feed uses one of them
(``event_type``, default the sample's), so a consumer can be tried with either.

``FeedPublisher`` sends each one as one Event Hubs message (the body a JSON array holding the one
event, as Event Grid delivers; ``body="object"`` sends the bare object) from its own thread, so the
simulator never waits for the hub. It can hold every event back ``delay_seconds`` and drop
events (``drop``: all while on; ``drop_next``: the next N), to test a consumer's catch-up.
``azure-eventhub`` is imported only when a hub is configured.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from se_forwarder.timestamps import rfc3339

log = logging.getLogger("se_forwarder.simulator")

EVENT_TYPE = "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted"
WRITE_TYPE = "microsoft.maintenance/scheduledevents/write"
EVENT_TYPES = (EVENT_TYPE, WRITE_TYPE)
DATA_API_VERSION = "2024-07-01"
CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
BODIES = ("array", "object")


def cloud_event(subscription: str, resource_info: Mapping[str, Any], when: float,
                event_type: str = EVENT_TYPE) -> dict[str, Any]:
    """The ``ScheduledEventEmitted`` CloudEvent for one change of a scheduled event, of type
    ``event_type`` (one of ``EVENT_TYPES``)."""
    stamp = rfc3339(when, milliseconds=True)
    return {
        "specversion": "1.0",
        "id": str(uuid.uuid4()),
        "source": f"/subscriptions/{subscription}",
        "subject": resource_info["id"],
        "type": event_type,
        "time": stamp,
        "data": {
            "resourceInfo": dict(resource_info),
            "operationalInfo": {"resourceEventTime": stamp},
            "apiVersion": DATA_API_VERSION,
        },
    }


def message_body(event: Mapping[str, Any], body: str = "array") -> bytes:
    """The Event Hubs message body for ``event``: ``[event]`` (Event Grid's) or the bare object."""
    return json.dumps([event] if body == "array" else event, separators=(",", ":")).encode("utf-8")


@dataclass(eq=False)
class _Pending:
    due: float
    event: dict[str, Any]


class FeedPublisher:
    """Publishes the feed's CloudEvents to one Event Hub (module docstring)."""

    def __init__(
        self,
        connection_string: str | None = None,
        eventhub: str | None = None,
        *,
        delay_seconds: float = 0.0,
        body: str = "array",
        keep: int = 10_000,
        event_type: str = EVENT_TYPE,
    ) -> None:
        self.connection_string = connection_string
        self.eventhub = eventhub
        self.delay_seconds = delay_seconds
        self.body = body
        self.event_type = event_type
        self.drop = False
        self.drop_next = 0
        self.emitted: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self.counts = {"emitted": 0, "published": 0, "dropped": 0, "failed_sends": 0}
        self._pending: collections.deque[_Pending] = collections.deque()
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Any = None

    # -- what the simulator calls ---------------------------------------------------------------

    def publish(self, event: dict[str, Any]) -> None:
        """Record ``event`` and queue it for the hub (unless dropped); never blocks on the hub."""
        with self._wake:
            self.emitted.append(event)
            self.counts["emitted"] += 1
            if self.drop or self.drop_next > 0:
                self.drop_next = max(0, self.drop_next - 1)
                self.counts["dropped"] += 1
                info = event["data"]["resourceInfo"]
                log.info("feed: dropped %s %s", info["name"],
                         info["properties"].get("EventStatus") or event["type"])
                return
            if self.connection_string:
                self._pending.append(_Pending(time.monotonic() + self.delay_seconds, event))
                self._wake.notify()

    def settings(self) -> dict[str, Any]:
        with self._wake:
            return {
                "hub": bool(self.connection_string),
                "eventhub": self.eventhub,
                "delay_seconds": self.delay_seconds,
                "drop": self.drop,
                "drop_next": self.drop_next,
                "body": self.body,
                "event_type": self.event_type,
                "pending": len(self._pending),
                **self.counts,
            }

    def update(self, spec: Any) -> dict[str, Any]:
        """Change ``delay_seconds``, ``drop``, ``drop_next``, ``body`` or ``event_type``; ValueError
        naming a bad one."""
        if not isinstance(spec, dict):
            raise ValueError("the body must be a JSON object")
        known = ("delay_seconds", "drop", "drop_next", "body", "event_type")
        unknown = sorted(set(spec) - set(known))
        if unknown:
            raise ValueError(f"unknown feed setting {unknown[0]!r} (known: {', '.join(known)})")
        delay = spec.get("delay_seconds", self.delay_seconds)
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= 3600:
            raise ValueError("delay_seconds must be a number of seconds from 0 to 3600")
        drop_next = spec.get("drop_next", self.drop_next)
        if isinstance(drop_next, bool) or not isinstance(drop_next, int) or drop_next < 0:
            raise ValueError("drop_next must be a whole number >= 0")
        if not isinstance(spec.get("drop", False), bool):
            raise ValueError("drop must be true or false")
        if spec.get("body", self.body) not in BODIES:
            raise ValueError(f"body must be one of {', '.join(BODIES)}")
        if spec.get("event_type", self.event_type) not in EVENT_TYPES:
            raise ValueError(f"event_type must be one of {', '.join(EVENT_TYPES)} (the two spellings "
                             "Microsoft's page gives)")
        with self._wake:
            self.delay_seconds = float(delay)
            self.drop_next = drop_next
            self.drop = spec.get("drop", self.drop)
            self.body = spec.get("body", self.body)
            self.event_type = spec.get("event_type", self.event_type)
        return self.settings()

    def clear(self) -> None:
        """Forget what was emitted and not yet sent (the simulator was reset)."""
        with self._wake:
            self.emitted.clear()
            self._pending.clear()

    # -- the sending thread -----------------------------------------------------------------------

    def start(self) -> None:
        if self.connection_string and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="sim-feed", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._reset_producer()

    def _next(self) -> _Pending | None:
        """The pending event due first (a delayed one does not hold back later ones), once due."""
        with self._wake:
            while not self._stop.is_set():
                if self._pending:
                    item = min(self._pending, key=lambda p: p.due)
                    wait = item.due - time.monotonic()
                    if wait <= 0:
                        return item
                    self._wake.wait(wait)
                else:
                    self._wake.wait(1.0)
        return None

    def _run(self) -> None:
        backoff = 0.2
        while (item := self._next()) is not None:
            try:
                self._send(item.event)
            except Exception as exc:  # a hub that is down: keep the event, try again
                self.counts["failed_sends"] += 1
                log.warning("feed: sending to the hub failed (%s); retrying", exc)
                self._reset_producer()
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.2
            with self._wake:
                if item in self._pending:
                    self._pending.remove(item)
                self.counts["published"] += 1

    def _send(self, event: dict[str, Any]) -> None:
        from azure.eventhub import EventData, EventHubProducerClient

        assert self.connection_string is not None  # the thread runs only with a hub
        if self._producer is None:
            kwargs: dict[str, Any] = {"retry_total": 1, "retry_backoff_factor": 0.2}
            if self.eventhub:
                kwargs["eventhub_name"] = self.eventhub
            self._producer = EventHubProducerClient.from_connection_string(self.connection_string, **kwargs)
        data = EventData(message_body(event, self.body))
        data.content_type = CONTENT_TYPE
        data.properties = {
            "aeg-event-type": "Notification",
            "aeg-metadata-version": "1.0",
            "aeg-output-event-id": event["id"],
            "aeg-delivery-count": "0",
            "aeg-subscription-name": "SE-FORWARDER-SIMULATOR",
        }
        batch = self._producer.create_batch()
        batch.add(data)
        self._producer.send_batch(batch)

    def _reset_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close()
            except Exception:  # closing a broken link must not stop the simulator
                log.debug("feed: closing the producer failed", exc_info=True)
