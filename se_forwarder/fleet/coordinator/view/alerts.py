"""The coordinator's alerts: what pages on-call (PagerDuty, Opsgenie; output/pager.py). Pure.

An ``Alert`` is open or resolved, nothing else: ``id`` (stable: the pager's dedup key, or alias,
is made from it, so a trigger sent twice opens one alert and its resolve closes it), ``kind``,
``summary`` (one line), ``severity`` (``critical``, ``error``, ``warning``, ``info``) and
``details``. Kinds (``KINDS``):

========================  ==========================================================================
``breach``                a Scheduled event alone takes more VMs of a budgeted scope down at its
                          NotBefore than the budget allows (a ``breach`` decision); id
                          ``breach/<EventId>``, open until the event has ended
``acknowledge-refused``   ARM refused an approval through ``acknowledge`` with a 403 and it waits for
                          its next try (decide/arm_path.py); one alert for every such event, open
                          while one waits
``feed-refused``          every event of the Azure feed of the last 10 minutes was refused at the
                          edge (input/feed_watch.py)
``fold-stalled``          the fold does not move: the service's loop has not answered for a minute,
                          or the agents' hub has not been read for five (output/alerting.py)
``fold-gap``              this instance does not act: its fold misses events (a position older than
                          its partition's retained beginning, or a rolled-back snapshot;
                          input/lag.py); sent by the instance that holds the lease all the same
``fold-late``             the lag guard has stopped early approvals for a minute on end: the fold
                          is more than ``max_lag`` behind a hub (input/lag.py)
``name-conflict``         VMs heard from lately claim one name in one group, or one resourceId: each
                          counts as unavailable, and once the conflict outlasts heartbeat_timeout
                          every one but the first claimant (decide/availability.py); one alert
``key-conflict``          a vmId's attested document came with two keys (fold/identities.py): neither
                          speaks for it and it counts down in every budget; one alert for every such
                          vmId, open until an operator or a newer document settles each
``recovery-timeout``      with ``free_slot = "recovered"``: a VM was not seen recovered
                          ``recover_timeout`` after its event ended (decide/recovery.py); it stays
                          counted down. One alert naming every such VM, open while one is
``gate-closed``           a gate of ``[[gates]]`` is closed (its alerts fire, or it cannot be asked;
                          input/gates.py); id ``gate-closed/<name>``, open while it is closed,
                          ``warning`` when it cannot be asked, ``info`` otherwise
========================  ==========================================================================

Two ways in, both one call:

- **Derived from the fold**: ``derive(state, evaluation)`` says which of the fold's alerts are
  open and which are resolved, from nothing but the fold and the decision pass. After a restart,
  or when another instance takes over, they come out the same, and are sent again: the pager's
  dedup makes a repeated trigger or resolve change nothing. A kind the fold can tell is one more
  function in ``DERIVED``.
- **Raised by a part of the service**: ``service.alerts.raise_(Alert(...))`` and
  ``service.alerts.clear(id)`` (output/alert_book.py) for what only a running part knows. Such a
  part raises again while its condition holds (after a restart too); ids in ``FIXED`` that are
  not open are sent resolved once after a start, which closes what a crashed instance left open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..decide.evaluate import Evaluation
from ..fold.state import FleetState

SEVERITIES = ("critical", "error", "warning", "info")
KINDS = ("breach", "acknowledge-refused", "feed-refused", "fold-stalled", "fold-gap", "fold-late",
         "name-conflict", "key-conflict", "recovery-timeout", "gate-closed")
FIXED = ("acknowledge-refused", "feed-refused", "fold-stalled", "fold-gap", "fold-late",
         "name-conflict", "key-conflict", "recovery-timeout")  # one alert each, not one per event
LISTED = 10  # events named in one alert's summary


@dataclass(frozen=True)
class Alert:
    """One alert, open (module docstring); resolved is its ``id`` alone."""

    id: str
    kind: str
    summary: str
    severity: str = "warning"
    details: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"alert kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"alert severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")
        if not self.id or len(self.id) > 400 or not self.summary:
            raise ValueError("an alert needs an id (at most 400 characters) and a summary")


@dataclass(frozen=True)
class Derived:
    """Which alerts of the fold are open now, and which it knows of that are resolved."""

    open: dict[str, Alert]
    resolved: frozenset[str]


def breaches(state: FleetState, _: Evaluation) -> tuple[list[Alert], set[str]]:
    """A ``breach`` alert per event with a breach decision, open while the event is open."""
    opened, closed = [], set()
    for key, record in state.events.items():
        if not record.breaches:
            continue
        ident = f"breach/{record.event_id}"
        if key not in state.open_events:
            closed.add(ident)
            continue
        latest = max(record.breaches.values(), key=lambda d: (d.time, d.id))
        scopes = sorted({str(s.get("scope")) for d in record.breaches.values()
                         for s in d.data.get("Budgets") or () if isinstance(s, dict) and s.get("scope")})
        vms = ", ".join(record.resources[:LISTED]) + (" ..." if len(record.resources) > LISTED else "")
        summary = (f"{record.event_type or 'Maintenance'} {record.event_id} breaches the budget: "
                   f"{latest.data.get('Reason') or latest.code}")
        opened.append(Alert(ident, "breach", summary, "error",
                            {"EventId": record.event_id, "Scopes": ", ".join(scopes), "VMs": vms}))
    return opened, closed


def refused_acknowledges(_: FleetState, evaluation: Evaluation) -> tuple[list[Alert], set[str]]:
    """One ``acknowledge-refused`` alert while any event waits for another try after a 403."""
    waiting = sorted((v for v in evaluation.verdicts.values() if v.code == "acknowledge-refused"),
                     key=lambda v: v.event_id)
    if not waiting:
        return [], {"acknowledge-refused"}
    named = ", ".join(v.event_id for v in waiting[:LISTED]) + (" ..." if len(waiting) > LISTED else "")
    policy = any("RequestDisallowedByPolicy" in v.reason for v in waiting)
    fix = "an Azure Policy denies it" if policy else \
        "give the coordinator's identity Scheduled Events Contributor"
    summary = f"ARM refuses the coordinator's acknowledge (403) for {len(waiting)} event(s): {named}; {fix}"
    return [Alert("acknowledge-refused", "acknowledge-refused", summary, "error",
                  {"Events": named, "First": waiting[0].reason[:1000]})], set()


def claimed_twice(state: FleetState, evaluation: Evaluation) -> tuple[list[Alert], set[str]]:
    """One ``name-conflict`` alert while VMs claim one name or resourceId (``evaluation.conflicts``)."""
    if not evaluation.conflicts:
        return [], {"name-conflict"}
    vms = state.vms

    def named(key: str) -> str:
        return vms[key].name if key in vms else key

    held = sorted(named(k) for k, c in evaluation.conflicts.items() if c.held)
    first = sorted(named(k) for k, c in evaluation.conflicts.items() if c.first and not c.held)
    listed = ", ".join(held[:LISTED]) + (" ..." if len(held) > LISTED else "")
    summary = (f"{len(evaluation.conflicts)} VM(s) claim a name or resourceId another VM claims; "
               f"counted as unavailable: {listed or 'none'}")
    return [Alert("name-conflict", "name-conflict", summary, "warning",
                  {"Held": listed, "First": ", ".join(first[:LISTED])})], set()


def recovery_timeouts(state: FleetState, evaluation: Evaluation) -> tuple[list[Alert], set[str]]:
    """One ``recovery-timeout`` alert while any VM is not seen recovered in time (recovery.py)."""
    late = sorted(evaluation.overdue, key=lambda o: (o.done, o.event_id, o.vm))
    if not late:
        return [], {"recovery-timeout"}
    vms = [f"{state.vms[o.vm].name if o.vm in state.vms else o.vm} ({o.event_id})" for o in late]
    named = ", ".join(vms[:LISTED]) + (" ..." if len(vms) > LISTED else "")
    minutes = max(0.0, evaluation.now - late[0].done) / 60
    summary = (f"{len(late)} VM(s) not recovered after their maintenance ended, each still counted "
               f"unavailable: {named}; the longest for {minutes:.0f} min")
    return [Alert("recovery-timeout", "recovery-timeout", summary, "error",
                  {"VMs": named, "Events": ", ".join(sorted({o.event_id for o in late})[:LISTED])})], set()


def closed_gates(state: FleetState, _: Evaluation) -> tuple[list[Alert], set[str]]:
    """A ``gate-closed`` alert per closed gate (fold/gates.py), resolved once it opens."""
    opened, closed = [], set()
    for gate in state.gates.values():
        ident = f"gate-closed/{gate.name}"
        if gate.open:
            closed.add(ident)
            continue
        summary = f"gate {gate.name} ({gate.scope}) is closed: {gate.reason}"[:1000]
        opened.append(Alert(ident, "gate-closed", summary, "warning" if gate.unreachable else "info",
                            {"Gate": gate.name, "Scope": gate.scope, "Type": gate.kind,
                             "Alerts": ", ".join(gate.alerts)[:1000]}))
    return opened, closed


def key_conflicts(state: FleetState, _: Evaluation) -> tuple[list[Alert], set[str]]:
    """One ``key-conflict`` alert while any vmId's document is in dispute between two keys."""
    if not state.conflicts:
        return [], {"key-conflict"}
    vms = sorted(state.conflicts, key=lambda vm: (state.conflicts[vm].since, vm))
    named = ", ".join(vms[:LISTED]) + (" ..." if len(vms) > LISTED else "")
    summary = (f"{len(vms)} vmId(s) registered with two keys for one attested document, counted down in "
               f"every budget until settled (coordinator settle-identity): {named}")
    return [Alert("key-conflict", "key-conflict", summary, "error", {"VMs": named})], set()


Derive = Callable[[FleetState, Evaluation], tuple[list[Alert], set[str]]]  # (open, resolved ids)
DERIVED: list[Derive] = [breaches, refused_acknowledges, claimed_twice, closed_gates, key_conflicts,
                         recovery_timeouts]


def derive(state: FleetState, evaluation: Evaluation) -> Derived:
    """The fold's alerts (module docstring): ``evaluation`` is the decision pass of ``state``."""
    opened: dict[str, Alert] = {}
    resolved: set[str] = set()
    for kind in DERIVED:
        found, closed = kind(state, evaluation)
        opened.update((a.id, a) for a in found)
        resolved |= closed
    return Derived(opened, frozenset(resolved - set(opened)))


def merged(derived: Derived, raised: Iterable[Alert], service: Iterable[Alert]) -> Derived:
    """What the fold derives, what parts raised and what the service itself says, in one: ``FIXED``
    ids that none of them holds open count as resolved."""
    opened = dict(derived.open)
    for alert in (*raised, *service):
        opened.setdefault(alert.id, alert)
    return Derived(opened, frozenset((set(derived.resolved) | set(FIXED)) - set(opened)))


def as_data(alert: Alert) -> dict[str, Any]:
    return {"id": alert.id, "kind": alert.kind, "summary": alert.summary, "severity": alert.severity,
            "details": dict(alert.details)}
