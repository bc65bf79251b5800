"""The fleet demo's rollout: what Azure does to the demo's fleet, played on the simulator.

First a **hardware failure** of ``api_3``: an unplanned Reboot that appears directly as Started (no
notice). It uses up the scale set's budget, and the rollout is announced once the coordinator
counts ``api_3`` down. Then, all at once (times are simulated: the demo runs at 60x, so a minute
lasts a second):

- a platform **Reboot** of every VM of the availability set ``web``: one event per VM, all with
  the same NotBefore (``NOTICE`` ahead), so Azure alone would start all six at that moment;
- a platform **Redeploy** of every VM of the scale set ``api``, the same way;
- a **Freeze** of the standalone VM ``db`` with its usual notice (``FREEZE_NOTICE``): the
  coordinator does not manage Freezes, so Azure starts it at its NotBefore.

The failure comes before the rollout so that what Azure does unannounced never takes a second VM of
a group down by itself: the budgets are the coordinator's, and an event it was not asked about it
can only count. (Mid-rollout, a failure would meet a VM that still counts as down for
``min_healthy`` after its maintenance.)

The EventIds are chosen in the order the coordinator should take each group's VMs (it takes events
of equal NotBefore by EventId), so every run tells the same story.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..simulator.history import EventLife

NOTICE = 120 * 60  # simulated seconds from the announcement to the rollout's NotBefore
REBOOT_TAKES = 150  # simulated seconds a Reboot or Redeploy stays Started
FREEZE_NOTICE, FREEZE_TAKES = 15 * 60, 90
FAILURE_TAKES = 420
WEB = tuple(f"web-{i}" for i in range(6))
API = tuple(f"api_{i}" for i in range(4))
DB, FAILING = "db", "api_3"
FAILURE_DESCRIPTION = "The virtual machine is being restarted after a failure of its host's hardware."


@dataclass(frozen=True)
class Announced:
    """The events the rollout added, by role."""

    web: dict[str, str]  # VM -> EventId of its Reboot
    api: dict[str, str]  # VM -> EventId of its Redeploy
    freeze: str

    @property
    def event_ids(self) -> set[str]:
        return {*self.web.values(), *self.api.values(), self.freeze}


class Rollout:
    """``fail`` (the hardware failure), then ``announce`` the rest, until ``done``."""

    def __init__(self, sim: Any, lives: Callable[[], list[EventLife]]) -> None:
        self.sim, self.lives = sim, lives  # the engine, and the simulator's history
        self.announced: Announced | None = None
        self.failure: str | None = None  # the hardware failure's EventId

    def fail(self) -> str:
        event = self.sim.add_event({"EventType": "Reboot", "EventStatus": "Started", "Resources": [FAILING],
                                    "EventSource": "Platform", "StartedSeconds": FAILURE_TAKES,
                                    "Description": FAILURE_DESCRIPTION})
        self.failure = str(event["EventId"])
        return self.failure

    def announce(self) -> Announced:
        ids = iter(sorted(str(uuid.uuid4()).upper() for _ in WEB + API))
        web = {vm: self._add(next(ids), "Reboot", vm, NOTICE, REBOOT_TAKES) for vm in WEB}
        api = {vm: self._add(next(ids), "Redeploy", vm, NOTICE, REBOOT_TAKES) for vm in API}
        freeze = self._add(str(uuid.uuid4()).upper(), "Freeze", DB, FREEZE_NOTICE, FREEZE_TAKES,
                           DurationInSeconds=9)
        self.announced = Announced(web, api, freeze)
        return self.announced

    def _add(self, event_id: str, kind: str, vm: str, notice: int, takes: int, **more: Any) -> str:
        self.sim.add_event({"EventId": event_id, "EventType": kind, "Resources": [vm],
                            "EventSource": "Platform", "NotBeforeInSeconds": notice,
                            "StartedSeconds": takes, **more})
        return event_id

    def done(self) -> bool:
        """Every event of the rollout, the hardware failure too, has come and gone."""
        if self.announced is None or self.failure is None:
            return False
        ours = self.announced.event_ids | {self.failure}
        ended = {life.event_id for life in self.lives() if life.ended is not None}
        return ours <= ended

    def lives_of_rollout(self) -> list[EventLife]:
        ours = (self.announced.event_ids if self.announced else set()) | (
            {self.failure} if self.failure else set())
        return [life for life in self.lives() if life.event_id in ours]
