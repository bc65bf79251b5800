"""The coordinator's ``/metrics`` (Prometheus text) and ``/healthz`` (200 or 503, one line), as the agent has.

Each renders a typed snapshot (stats.py) and reads nothing else. Metric values are taken on the
service's own thread (``Service.stats``, ``Service.fleet_stats``), so a scrape never sees a
half-updated fold; that thread never waits on the Azure services (service.py), so a scrape is
answered during an outage too. ``/healthz`` renders ``Service.health()``: what the service's parts
record (reach.py), never the fold, so it answers even while the loop is busy: 200 with
``ok: ...``, or ``degraded:`` naming each part that is unreachable now with its last success (and a
signing key that cannot be read: nothing can be published), and 503 once one of those has lasted
``UNHEALTHY_AFTER`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from .stats import FleetStats, Health, Stats

UNHEALTHY_AFTER = 60.0
PREFIX = "se_forwarder_coordinator_"


def values(stats: Stats, fleet: FleetStats) -> dict[str, Any]:
    """Everything ``/metrics`` shows (``render``), from snapshots taken on the service thread."""
    came, out = stats.admission, stats.output
    return {
        "folded": came.folded, "skipped": came.skipped, "refused": came.refused, "capped": came.capped,
        "decisions": stats.decisions, "published": out.published,
        "publish_failures": out.publish_failures, "sent": out.sent, "send_failures": out.send_failures,
        "dropped": out.dropped, "leader": int(stats.leading), "acting": int(stats.acting),
        "vms": stats.vms, "open_events": stats.open_events, "queue_conflicts": fleet.queue_conflicts,
        "name_conflicts": fleet.name_conflicts, "outside_inventory": fleet.outside_inventory,
        "identities": stats.identities, "waiting": came.waiting, "rekeyed": came.rekeyed,
        "held_bytes": came.held_bytes, "key_conflicts": came.key_conflicts,
        "intermediates_missing": came.intermediates_missing, "verifier_restarts": came.verifier_restarts,
        "pending_sends": out.pending_sends, "latencies": list(out.latencies),
        "last_input_age": stats.last_input_age,
        "lags": [(lag.label, lag.seconds, lag.events) for lag in stats.lags], "gap": int(bool(stats.gap)),
        "stale": int(bool(stats.stale)),
        "reach": {name: (r.reachable, r.failures, r.overdue, r.last_success)
                  for name, r in stats.reach.items()},
        "azure": None if fleet.azure_counts is None else {
            "counts": fleet.azure_counts, "agentless": fleet.agentless, "vms": fleet.azure_vms,
            "findings": fleet.findings},
    }


def render(v: dict[str, Any]) -> bytes:
    """Prometheus text exposition of ``values`` (plus the process's CPU and memory)."""
    from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

    class Collector:
        def collect(self) -> Iterator[Any]:
            yield from _input_metrics(v, CounterMetricFamily)
            yield from _service_metrics(v, CounterMetricFamily, GaugeMetricFamily)
            yield from _reach_metrics(v, CounterMetricFamily, GaugeMetricFamily)
            yield from _azure_metrics(v["azure"], CounterMetricFamily, GaugeMetricFamily)
            latencies = v["latencies"]
            yield SummaryMetricFamily(PREFIX + "approval_latency_seconds",
                                      "From the hub input that made an approval possible to its queue "
                                      "message (recent approvals).", count_value=len(latencies),
                                      sum_value=round(sum(latencies), 6))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())  # type: ignore[arg-type]
    ProcessCollector(registry=registry)
    return generate_latest(registry)


def _input_metrics(v: dict[str, Any], counter: Any) -> Iterator[Any]:
    """What became of the events read: folded, skipped, refused at the edge, capped."""
    for name, help_text, label in (
        ("folded", "Hub events folded, by CloudEvent type (com.azure.scheduledevents. left out).", "type"),
        ("skipped", "Hub events counted and skipped, by why.", "reason"),
        ("refused", "Hub events dropped before the fold by trust.py, by reason (its reason table: forged "
                    "and foreign decisions, unsigned, unregistered, bad-signature and wrong-vm reports, "
                    "identity-* registrations).", "reason"),
        ("capped", "What the fold dropped of agents' reports by a [limits] cap or rule (whole reports and "
                   "parts), by why.", "reason"),
    ):
        family = counter(PREFIX + name, help_text, labels=[label])
        counts = v[name].items()
        for key, count in sorted(counts) if name == "folded" else counts:
            family.add_metric([key], count)
        yield family


def _service_metrics(v: dict[str, Any], counter: Any, gauge: Any) -> Iterator[Any]:
    for name, help_text in (
        ("decisions", "Decisions made by this instance."),
        ("published", "Decisions published to the hub by this instance."),
        ("publish_failures", "Failed attempts to publish decisions (retried)."),
        ("sent", "Approval messages sent to the agents' queues."),
        ("send_failures", "Attempts to send an approval message that failed (retried)."),
        ("dropped", "Decisions dropped unpublished because this instance stopped leading."),
        ("rekeyed", "vmIds that registered a new identity key with a newer document (reinstalls)."),
        ("verifier_restarts", "Verification worker pools made again after a worker died."),
    ):
        yield counter(PREFIX + name, help_text, value=v.get(name, 0))
    for name, help_text in (
        ("leader", "1 while this instance holds the leader lease."),
        ("acting", "1 while it leads and has read the hub up to its end (it decides)."),
        ("vms", "VMs in the fold."),
        ("open_events", "Events not completed or canceled."),
        ("queue_conflicts", "VMs whose approval queue another VM's is too (sent no approval)."),
        ("name_conflicts", "VMs heard from lately that claim a name or resourceId another such VM claims."),
        ("outside_inventory", "VMs that claim a placement beyond where they were placed (counted in no "
         "percentage scope's size until confirmed)."),
        ("identities", "VMs with a registered identity key."),
        ("waiting", "Reports held until their VM's registration (or an intermediate) arrives."),
        ("pending_sends", "Approval messages waiting to be sent (the queues do not answer)."),
        ("held_bytes", "Bytes of the reports held until their VM's registration."),
        ("key_conflicts", "vmIds whose attested document came with two keys: counted down until settled "
                          "(alert on > 0)."),
        ("intermediates_missing", "CA Issuers URLs whose intermediate could not be fetched (alert on > 0: "
                                  "give it as [trust] attestation_intermediates)."),
    ):
        yield gauge(PREFIX + name, help_text, value=v.get(name, 0))


def _reach_metrics(v: dict[str, Any], counter: Any, gauge: Any) -> Iterator[Any]:
    """Each part's reachability, failed calls and last success; the age of the last input."""
    reachable = gauge(PREFIX + "reachable", "1 while the part answers (storage, queues, hub-read, "
                      "hub-publish; with [azure]: azure-feed, arm).", labels=["part"])
    failures = counter(PREFIX + "call_failures", "Failed calls to each part, by kind (error, or timeout: "
                       "no answer by the deadline).", labels=["part", "kind"])
    success = gauge(PREFIX + "last_success_timestamp_seconds", "When a call to the part last succeeded "
                    "(unix time).", labels=["part"])
    for part, (ok, failed, overdue, last) in v["reach"].items():
        reachable.add_metric([part], int(ok))
        failures.add_metric([part, "error"], failed - overdue)
        failures.add_metric([part, "timeout"], overdue)
        if last is not None:
            success.add_metric([part], round(last, 3))
    yield reachable
    yield failures
    yield success
    lag = gauge(PREFIX + "fold_lag_seconds", "How far the fold is behind each hub: the age of the oldest "
                "event on it not folded yet (input/lag.py).", labels=["hub"])
    behind = gauge(PREFIX + "fold_lag_events", "Events on each hub not folded yet.", labels=["hub"])
    for label, seconds, events in v["lags"]:
        lag.add_metric([label], round(seconds, 3))
        behind.add_metric([label], events)
    yield lag
    yield behind
    yield gauge(PREFIX + "stale", "1 while no early approval is made because the fold is more than max_lag "
                "behind a hub (the lag guard).", value=v["stale"])
    yield gauge(PREFIX + "fold_gap", "1 once the fold misses events (a position older than its partition's "
                "beginning, or a rolled-back snapshot): the instance does not act.", value=v["gap"])
    if v["last_input_age"] is not None:
        yield gauge(PREFIX + "last_input_age_seconds", "Seconds since the last event arrived from the hub.",
                    value=round(v["last_input_age"], 3))


def _azure_metrics(v: dict[str, Any] | None, counter: Any, gauge: Any) -> Iterator[Any]:
    if v is None:
        return
    inputs = counter(PREFIX + "azure", "Azure's input by what became of it: feed-folded, feed-<refusal>, "
                     "graph-<refusal> (rows), acknowledge-<outcome>.", labels=["what"])
    for what, count in sorted(v["counts"].items()):
        inputs.add_metric([what], count)
    yield inputs
    yield gauge(PREFIX + "azure_vms", "VMs Azure lists in the managed subscriptions.", value=v["vms"])
    yield gauge(PREFIX + "azure_agentless", "VMs Azure lists that no agent reports.", value=v["agentless"])
    findings = gauge(PREFIX + "azure_findings", "Current disagreements between Azure and an agent, by "
                     "field (status, fault domain, scale set, ...).", labels=["field"])
    for field, count in sorted(v["findings"].items()):
        findings.add_metric([field], count)
    yield findings


def health(h: Health) -> tuple[bool, str]:
    """(healthy, one line): what this instance is doing, and every part that does not answer; a fold
    that misses events (a gap) is unhealthy at once, a late one (the lag guard) degraded."""
    where = ", ".join(f"{p}:{seq}" for p, seq in sorted(h.positions.items())) or "nothing yet"
    line = f"{h.role}, {h.vms} VMs, read up to {where}"
    if not h.acting and h.leading and not h.gap:
        line += f"; not acting: {h.why_not}"
    if h.gap:
        return False, f"unhealthy: the fold has a gap, this instance does not act: {h.gap}; {line}"
    if h.stale:
        line += f"; no early approval: {h.stale}"
    if not h.down and h.unsigned is None:
        return (True, f"degraded: {line}") if h.stale else (True, f"ok: {line}")
    problems = list(h.down)
    if h.unsigned is not None:
        age, why = time.monotonic() - h.unsigned[0], h.unsigned[1]
        problems.append((age, f"decisions cannot be signed for {age:.0f} s: {why}"))
    worst = max(age for age, _ in problems)
    text = "; ".join(said for _, said in problems)
    if worst > UNHEALTHY_AFTER:
        return False, f"unhealthy: {text}; {line}"
    return True, f"degraded: {text}; {line}"
