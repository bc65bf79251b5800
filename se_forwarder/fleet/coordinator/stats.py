"""What one coordinator instance is and does at a moment: the typed snapshots observe.py renders
(and ``Stats.as_data``, the ``service`` member of ``status`` and ``/v1/state``).

``Service.stats()`` takes a ``Stats`` on the service's own thread (``Service.submit``), so it never
sees a half-updated fold: the counters of every part, the fold's sizes, reachability. ``Service.health()``
takes a ``Health`` from what the parts record, off the loop, so ``/healthz`` answers while the loop is
busy. ``fleet_stats`` adds what costs a pass over the fleet (shared queues, Azure's findings), for
``/metrics`` only. Plain data and the fold: nothing here reads the service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config.policy import Policy
from .decide.availability import conflicts
from .decide.scopes import index
from .fold.state import FleetState
from .input.admission import AdmissionCounts
from .input.lag import Lag
from .output.publish import OutputCounts
from .view import azure as azure_view


@dataclass(frozen=True)
class Reachability:
    """One part (storage, queues, hub-read, hub-publish, azure-feed, arm) as reach.py records it."""

    reachable: bool
    failures: int
    overdue: int
    last_success: float | None
    data: dict[str, Any]  # Reach.as_data(): for status and /v1/state


@dataclass(frozen=True)
class Health:
    """What ``/healthz`` says: the instance's role and each part that does not answer."""

    role: str
    leading: bool  # holds the lease
    acting: bool
    why_not: str  # why it does not act ("" when it does)
    vms: int
    positions: dict[str, int]  # partition -> sequence number read up to
    down: tuple[tuple[float, str], ...] = ()  # (seconds failing, one line) per unreachable part
    unsigned: tuple[float, str] | None = None  # (monotonic since, why) while decisions cannot be signed
    stale: str = ""  # why the fold is too late to approve on while acting (input/lag.py), "" when not
    gap: str = ""  # the fold misses events retention took: it does not act (input/lag.py)


@dataclass(frozen=True)
class Stats:
    """Everything ``/metrics`` and the ``service`` member of ``status`` show."""

    name: str
    instance: str
    source: str
    role: str
    leading: bool  # holds the lease
    acting: bool
    why_not: str
    leader: dict[str, str] | None  # {"instance", "api"} of whoever leads, when known
    positions: dict[str, int]
    admission: AdmissionCounts
    output: OutputCounts
    decisions: int
    vms: int
    open_events: int
    identities: int
    last_input_age: float | None
    reach: dict[str, Reachability] = field(default_factory=dict)
    azure: dict[str, Any] | None = None  # AzureInput.describe(); None without [azure]
    lags: list[Lag] = field(default_factory=list)  # each hub's, at the last decision pass
    stale: str = ""  # why no early approval is made on the fold now (the lag guard), "" when it is fresh
    gap: str = ""

    def as_data(self) -> dict[str, Any]:
        """What this instance is and does: the ``service`` member of ``status`` and ``/v1/state``."""
        return {
            "name": self.name, "instance": self.instance, "role": self.role,
            "acting": self.acting, "notActing": None if self.acting else self.why_not, "source": self.source,
            "leader": self.leader, "positions": self.positions,
            "folded": sum(self.admission.folded.values()),
            "skipped": self.admission.skipped["other-type"] + self.admission.skipped["not-cloudevent"],
            "refused": self.admission.refused, "waiting": self.admission.waiting,
            "decisionsMade": self.decisions, "pendingSends": self.output.pending_sends,
            "reachability": {name: r.data for name, r in self.reach.items()},
            "azure": self.azure,
            "lag": [{"hub": lag.label, "seconds": round(lag.seconds, 1), "events": lag.events,
                     "partition": lag.partition or None} for lag in self.lags],
            "stale": self.stale or None, "gap": self.gap or None,
        }


@dataclass(frozen=True)
class FleetStats:
    """What costs a pass over the fleet: VMs sharing a queue, and Azure's view (with ``[azure]``)."""

    queue_conflicts: int
    name_conflicts: int  # VMs that claim a name or resourceId another VM heard from lately claims
    outside_inventory: int  # VMs whose claimed placement moved beyond where they were placed
    azure_counts: dict[str, int] | None = None  # what became of Azure's input
    azure_vms: int = 0
    agentless: int = 0
    findings: dict[str, int] = field(default_factory=dict)  # disagreements by field


def fleet_stats(state: FleetState, policy: Policy, azure_counts: dict[str, int] | None,
                now: float) -> FleetStats:
    """``FleetStats`` of the fold (``azure_counts``: AzureInput.counts, None without ``[azure]``)."""
    idx = index(state, policy)
    claims = (len(conflicts(state, policy, idx, now)), sum(1 for out in idx.outside.values() if out))
    if azure_counts is None:
        return FleetStats(len(idx.shared_queue), *claims)
    by_field: dict[str, int] = {}
    for finding in azure_view.findings(state, idx):
        field_ = "tag" if finding["field"].startswith("tag:") else finding["field"]
        by_field[field_] = by_field.get(field_, 0) + 1
    return FleetStats(len(idx.shared_queue), *claims, azure_counts, len(state.azure.vms),
                      len(azure_view.agentless(state, idx)), by_field)
