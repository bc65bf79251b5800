"""A coordinator in this process for the page at fleet scale, where 10,000 agents cannot run: the
pure core's fold fed with real agent CloudEvents (bench/coordinator_fold.py's fleet), owned by one
thread that makes a decision pass every second and folds its decisions back, as service.py does.
It offers what the HTTP app (api.py, web/app.py) calls on the service; nothing goes to a hub or a
queue (there is none here).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from bench.coordinator_fold import LIMITS, fleet, heartbeat, iso, transition
from se_forwarder.fleet.coordinator import FleetState, evaluate, fold_json, load_policy, to_dict
from se_forwarder.fleet.coordinator.fold import claimed as fold_event
from se_forwarder.fleet.coordinator.view.digest import Digest

SOURCE = "urn:se-forwarder:coordinator:local"
POLICY = load_policy({
    "policy": {"approve_within": "2h", "min_healthy": "2m", "heartbeat_timeout": "1h", "group_tag": "group"},
    "budgets": [{"scope": "group", "max_unavailable": 1}, {"scope": "zone", "max_unavailable": "10%"},
                {"scope": "fleet", "max_unavailable": "5%"}],
})


def tagged(vms: int) -> list[list[dict]]:
    """bench/coordinator_fold.py's fleet, each availability set and scale set named by a ``group`` tag."""
    groups = fleet(vms)
    for members in groups:
        name = members[0]["vmScaleSetName"] or members[0]["name"].split("-")[0]
        for v in members:
            v["tags"] = {"group": name}
    return groups


def fleet_state(vms: int, events: int, now: float) -> tuple[FleetState, list[list[dict]]]:
    """``vms`` VMs heard from just now, each availability set and scale set named by a ``group``
    tag; ``events`` Reboots, one per availability set, reported by every VM of the set, NotBefore 20
    to 80 minutes ahead."""
    state = FleetState()
    groups = tagged(vms)
    for members in groups:
        for v in members:
            fold_json(state, heartbeat(v, now - 5, []), limits=LIMITS)  # the whole fleet at once
    for n, members in enumerate(groups[:events]):
        event_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"event/{n}")).upper()
        target = members[n % len(members)]
        for v in members:
            fold_json(state, transition("scheduled", v, event_id, [target["name"]], now - 1,
                                        now + 1200 + 60 * (n % 60)))
    return state, groups


def report(state: str, v: dict, event_id: str, names: list[str], t: float, not_before: float,
           event_type: str = "Reboot") -> dict:
    """An agent's transition CloudEvent (bench/coordinator_fold.py's) of any event type."""
    event = json.loads(transition(state, v, event_id, names, t, not_before))
    event["eventtype"] = event["data"]["EventType"] = event_type
    return dict(event)


def rollout_state(now: float, rolling: tuple[str, ...] = ("web0", "ss0"), vms: int = 40, took: float = 1750,
                  policy: Any = POLICY) -> tuple[FleetState, list[list[dict]]]:
    """A rollout that began ``took`` seconds before ``now``: every VM of the ``rolling`` groups got its
    own platform Reboot (NotBefore an hour after ``now``), reported Scheduled by its whole group. The
    real decision pass ran every 10 s of that time and its decisions were folded back; Azure and the
    agents are played here: each approved event Started 5 s after its approval and completed 60 s
    later. So the group budget paced them, and the last ones are still going on or waiting at ``now``."""
    state, groups = FleetState(), tagged(vms)
    start = now - took
    for members in groups:
        for v in members:
            fold_json(state, heartbeat(v, start, []))
    by_name = {v["name"]: v for members in groups for v in members}
    nb = now + 3600
    for members in groups:
        if members[0]["tags"]["group"] in rolling:
            for v in members:
                event_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"rollout/{v['name']}")).upper()
                for other in members:
                    fold_json(state, transition("scheduled", other, event_id, [v["name"]], start + 1, nb))
    later: list[tuple[float, dict]] = []  # (when, the report Azure's side sends then)
    t = start + 10
    while t < now:
        for when, event in [item for item in later if item[0] <= t]:
            fold_event(state, event)
        later = [item for item in later if item[0] > t]
        for decision in evaluate(state, policy, t).decisions:
            fold_event(state, to_dict(decision, SOURCE))
            if decision.kind == "approve" and decision.target is not None:
                v = by_name[decision.target.name]
                names = list(decision.resources)
                later.append((t + 5, report("started", v, decision.event_id or "", names, t + 5, nb)))
                later.append((t + 65, report("completed", v, decision.event_id or "", names, t + 65, nb)))
        t += 10
    for when, event in later:
        if when <= now:
            fold_event(state, event)
    return state, groups


class LocalCoordinator:
    def __init__(self, state: FleetState, policy: Any = POLICY) -> None:
        self.state, self.policy, self.source = state, policy, SOURCE
        self.digests = Digest()
        self.settings = None
        self.requests: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="local-coordinator", daemon=True)

    def start(self) -> LocalCoordinator:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)

    def _run(self) -> None:
        last = 0.0
        while not self.stopping.is_set():
            try:
                func, future = self.requests.get(timeout=0.05)
            except queue.Empty:
                pass
            else:
                try:
                    future.set_result(func())
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)
            if time.time() - last >= 1.0:
                last = time.time()
                for decision in evaluate(self.state, self.policy, last).decisions:
                    fold_event(self.state, to_dict(decision, SOURCE))
                self.digests.of(self.state)  # as the service keeps it after each pass

    def submit(self, func: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.requests.put((func, future))
        return future

    def acting(self) -> bool:
        return True

    def control(self, make: Callable[[FleetState, float], Any]) -> tuple[Any, Future[Any]]:
        decision = make(self.state, time.time())
        fold_event(self.state, to_dict(decision, SOURCE))
        published: Future[Any] = Future()
        published.set_result(to_dict(decision, SOURCE))  # as published (the service's is also signed)
        return decision, published

    def digest(self) -> str:
        return self.digests.of(self.state)

    def describe(self) -> dict[str, Any]:
        return {"name": "local", "instance": "here", "role": "leader", "acting": True, "source": SOURCE,
                "leader": None, "positions": {}, "folded": 0, "skipped": 0, "decisionsMade": 0,
                "time": iso(time.time())}

    def status(self, all_scopes: bool = False, decisions: int = 50) -> dict[str, Any]:
        from se_forwarder.fleet.coordinator.view.status import status

        return status(self.state, self.policy, time.time(), decisions_limit=decisions, all_scopes=all_scopes)
