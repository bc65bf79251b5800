"""Heartbeat CloudEvents: a sign of life for sinks with ``heartbeat_interval``.

They are built when due from what the agent knows at that moment (identity, last successful poll,
the current document, every sink's backlog, the ``[health]`` probes' verdict) and handed to the
sink by its delivery worker, never stored in the outbox: heartbeats must not pile up behind an
outage. See ``delivery.py`` for when a sink gets one (early, after the verdict changed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from . import cloudevents as ce
from . import metrics
from .model import Document, HealthVerdict, VmIdentity
from .outbox import Outbox
from .sinks.base import StoredEvent


class HeartbeatSource:
    """Makes one heartbeat on demand; safe to call from every delivery worker's thread."""

    def __init__(
        self,
        identity: Callable[[], VmIdentity],
        document: Callable[[], Document | None],
        sink_names: Sequence[str],
        health: Callable[[], HealthVerdict] | None = None,  # None: no [health]
    ) -> None:
        self.identity = identity
        self.document = document
        self.sink_names = list(sink_names)
        self.health = health

    def event(self, box: Outbox, interval: float) -> StoredEvent:
        """A heartbeat for a sink sending them every ``interval`` seconds (``box``: its outbox)."""
        now = datetime.now(UTC)
        backlog: dict[str, int] = {}
        for name in self.sink_names:
            try:
                backlog[name] = box.sink_status(name).backlog
            except KeyError:
                continue
        document = self.document()
        last_ok = metrics.polls.last_ok_wall
        cloud = ce.heartbeat(
            self.identity(), now, interval=interval,
            last_poll=datetime.fromtimestamp(last_ok, UTC) if last_ok is not None else None,
            document=document,
            incarnation=document.incarnation if document is not None else metrics.polls.incarnation,
            backlog=backlog,
            health=self.health() if self.health is not None else None,
        )
        return StoredEvent.never_stored(ce.for_outbox(cloud))
