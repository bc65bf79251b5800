"""The hubs the fold reads: the agents' Event Hub and, with ``[azure.feed]``, the Azure feed hub.

``Hubs`` runs one ``HubReader`` (hub_reader.py) per hub, both delivering into the service's one inbox,
each recording its reachability (reach.py: ``hub-read``, ``azure-feed``) and saying in its own
words when it loses and regains its hub. The feed's partitions are named ``feed:<hub>/<partition>``
(``FEED``), so the positions of both hubs are kept, saved with the snapshot and restored together
in one map, and the loop knows which hub a batch came from.

- ``start(positions)`` starts reading each hub from the positions of the fold it reads for (the
  fold the keeper loaded); ``close()`` stops both, before that fold is loaded again and at the stop.
- ``watches``: where each hub's partitions end and begin, as its reader's watcher last asked: the
  lag guard (lag.py) compares them with the folded positions.
- ``ends()`` is where every partition of both hubs ends now, named as the positions are: a new
  leader acts once its fold has read that far (ha/election.py), so it knows everything Azure said too.
  The feed's ends are read beside the agents' hub's, within ``FEED_ENDS_DEADLINE``; when they
  cannot be read (recorded as ``azure-feed`` failing) the agents' hub alone decides when the
  leader may act: the feed is the second input, and the catch-up brings what it missed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from ..azure.reach import Reach, begin, describe_error
from ..config.service import EventHubSettings
from .hub_reader import Batch, HubReader, Position, consumer, partition_ends
from .lag import Watch

log = logging.getLogger("se_forwarder.coordinator.hub")

FEED = "feed:"
FEED_PART = "azure-feed"
FEED_ENDS_DEADLINE = 8.0  # s; within leader.ENDS_DEADLINE, the agents' hub's ends being read meanwhile


class Hubs:
    def __init__(self, agents: EventHubSettings, feed: EventHubSettings | None, reach: dict[str, Reach],
                 deliver: Callable[[Batch], None], connect: Callable[..., Any] = consumer) -> None:
        self.agents, self.feed, self.deliver = agents, feed, deliver
        self.connect = connect  # makes the consumer clients of both hubs (access.Clients)
        self.hub, self.feed_reach = reach["hub-read"], reach.get(FEED_PART)
        self.prefix = f"{FEED}{feed.eventhub}/" if feed is not None else ""
        self._readers: list[HubReader] = []
        # where each hub's partitions end, as its watcher last asked (lag.py): kept across restarts
        self.watches = [Watch("the agents' hub")]
        if feed is not None:
            self.watches.append(Watch("the Azure feed hub", self.prefix, second=True))

    def start(self, positions: dict[str, Position]) -> None:
        """Read both hubs on from ``positions`` (module docstring)."""
        self.close()
        agents = {p: pos for p, pos in positions.items() if not p.startswith(FEED)}
        self._readers = [HubReader(self.agents, agents, self.deliver, self.hub, connect=self.connect,
                                   watch=self.watches[0])]
        if self.feed is not None:
            prefix = self.prefix
            start = {p[len(prefix):]: pos for p, pos in positions.items() if p.startswith(prefix)}
            deliver = partial(self._from_feed, prefix)
            label = "the Azure feed hub"
            self._readers.append(HubReader(self.feed, start, deliver, self.feed_reach, label=label,
                                            connect=self.connect, watch=self.watches[1]))
        for reader in self._readers:
            reader.start()

    def _from_feed(self, prefix: str, batch: Batch) -> None:
        self.deliver(replace(batch, partition=prefix + batch.partition))

    def close(self) -> None:
        readers, self._readers = self._readers, []
        for reader in readers:
            reader.close()

    def ends(self) -> dict[str, int]:
        """Where every partition of both hubs ends now (module docstring); raises when the agents'
        hub's cannot be read."""
        began = time.monotonic()
        feed = begin(partial(partition_ends, self.feed, self.connect),
                                  "coordinator-feed-ends") if self.feed else None
        ends = partition_ends(self.agents, self.connect)
        if feed is None or self.feed_reach is None:
            return ends
        left = max(0.5, FEED_ENDS_DEADLINE - (time.monotonic() - began))
        try:
            found = self.feed_reach.wait(feed, left, "reading where the Azure feed hub ends")
        except Exception as exc:  # noqa: BLE001 - recorded by reach; the feed is the second input
            log.warning("the Azure feed hub's ends cannot be read (%s); acting without reading it to its end",
                        describe_error(exc))
            return ends
        return {**ends, **{self.prefix + pid: end for pid, end in found.items()}}
