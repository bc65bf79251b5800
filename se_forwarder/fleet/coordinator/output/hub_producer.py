"""Decisions published to the Event Hub, in order, with a timeout.

``HubProducer`` publishes decisions as structured-mode CloudEvents (``application/cloudevents+json``,
the form AMQP and Kafka consumers read alike) in as few ``send_batch`` calls as fit, with a timeout:
the lease margin counts on a publish that either lands within it or fails (ha/lease.py). They all
carry one partition key (the coordinator's source), so they land in one partition in the order
they were made, and every instance reads them in that order (switches.py counts on it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ....errors import one_line
from ....sinks.azure_common import scrub
from ..azure.clients import producer
from ..config.service import EventHubSettings

log = logging.getLogger("se_forwarder.coordinator.hub")

CONTENT_TYPE = "application/cloudevents+json"
PUBLISH_TIMEOUT = 5.0  # seconds for one send_batch; lease.MARGIN is larger


class HubProducer:
    """Publishes decision CloudEvents (JSON texts); one producer for the service's life."""

    def __init__(self, settings: EventHubSettings, partition_key: str | None = None,
                 connect: Callable[[EventHubSettings], Any] = producer) -> None:
        self.settings, self.partition_key = settings, partition_key
        self.connect = connect  # makes the producer client (access.Clients)
        self._producer: Any = None

    def warm(self) -> None:
        """Open the producer's link now (the first send on a new link takes about half a second)."""
        from azure.eventhub.exceptions import EventHubError

        try:
            if self._producer is None:
                self._producer = self.connect(self.settings)
            self._producer.create_batch()
        except (EventHubError, OSError, ValueError) as exc:
            log.debug("the producer is not open yet: %s", scrub(one_line(str(exc))))
            self.drop()

    def publish(self, texts: Sequence[str]) -> None:
        """Publish every text, in order, or raise ``PublishError`` (nothing is retried here)."""
        from azure.eventhub import EventData
        from azure.eventhub.exceptions import EventHubError

        client = self._producer
        try:
            if client is None:
                client = self._producer = self.connect(self.settings)
            batch = client.create_batch(partition_key=self.partition_key)
            for text in texts:
                data = EventData(text)
                data.content_type = CONTENT_TYPE
                try:
                    batch.add(data)
                except ValueError:  # full: send what we have, start another
                    client.send_batch(batch, timeout=PUBLISH_TIMEOUT)
                    batch = client.create_batch(partition_key=self.partition_key)
                    batch.add(data)
            if len(batch):
                client.send_batch(batch, timeout=PUBLISH_TIMEOUT)
        except (EventHubError, OSError, ValueError) as exc:
            self.drop(client)
            raise PublishError(f"publishing to {self.settings.eventhub}: {scrub(one_line(str(exc)))}") \
                from None

    def drop(self, client: Any = None) -> None:
        """Close the producer (only if it is still ``client``, when given); the next publish opens one."""
        if client is not None and client is not self._producer:
            return
        producer_, self._producer = self._producer, None
        if producer_ is not None:
            try:
                producer_.close()
            except Exception as exc:  # noqa: BLE001 - closing a broken client must not hide the failure
                log.debug("closing the producer failed: %s", exc)


class PublishError(Exception):
    """Decisions could not be published; one line, no secret."""
