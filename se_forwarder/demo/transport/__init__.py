"""The fleet demo's transport: an Event Hub, Storage queues and a blob container in this process.

``se-forwarder demo --fleet`` runs the agents and the coordinator in one process with no Azure. What
would go through Azure goes through these instead:

- ``hub.LocalHub``: the Event Hub the agents' Event Hubs sinks send to and the coordinator reads
  and publishes its decisions to (partitions, sequence numbers, offsets, enqueued times);
- ``queues.LocalQueueService``: the approval queues the coordinator sends its signed messages to
  and each agent receives from (visibility timeout, pop receipts, dequeue counts, time to live);
- ``blobs.LocalContainer``: the coordinator's lease and snapshot blobs.

Each answers the calls our code makes of the Azure SDK's clients, as the service does, and raises
the SDK's exceptions: only where a client is made is anything different. They are handed in by code
(``agent.Transport`` for an agent, ``coordinator.access.Clients`` for the coordinator); no key of an
agent's configuration or of ``coordinator.toml`` can select them, and every test of the Azure paths
uses the Event Hubs broker and Azurite.
"""

from __future__ import annotations

from typing import Any

from ...agent import Transport
from ...fleet.coordinator.azure import Clients
from .blobs import LocalContainer
from .hub import NAMESPACE, LocalHub
from .queues import LocalQueueService

__all__ = ["NAMESPACE", "DemoTransport", "LocalContainer", "LocalHub", "LocalQueueService"]


class DemoTransport:
    """One hub, one queue service and one container, shared by every agent and the coordinator."""

    def __init__(self, eventhub: str, container: str) -> None:
        self.hub = LocalHub(eventhub)
        self.queues = LocalQueueService()
        self.container = LocalContainer(container)

    def for_agent(self) -> Transport:
        return Transport(eventhubs_producer=self.hub.producer, approval_queue=self.queues.client)

    def for_coordinator(self) -> Clients:
        def consumer(settings: Any, **_options: Any) -> Any:
            return self.hub.consumer(consumer_group=settings.consumer_group)

        return Clients(consumer=consumer, producer=lambda _settings: self.hub.producer(),
                       container=lambda _settings: self.container, queues=lambda _settings: self.queues)
