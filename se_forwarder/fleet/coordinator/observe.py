"""The coordinator's ``/metrics`` (Prometheus text) and ``/healthz`` (200 or 503, one line), as the agent has,
and ``describe``: what the instance is and does, for ``status`` and ``/v1/state``.

Metric values are read on the service's own thread (``Service.submit``), so a scrape never sees a
half-updated fold; that thread never waits on the Azure services (service.py), so a scrape is
answered during an outage too. ``/healthz`` reads only what the service's parts record (reach.py),
never the fold, so it answers even while the loop is busy: 200 with ``ok: ...``, or ``degraded:``
naming each part that is unreachable now with its last success (and a signing key that cannot be
read: nothing can be published), and 503 once one of those has lasted ``UNHEALTHY_AFTER`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import trust
from .limits import CAPS
from .scopes import index

if TYPE_CHECKING:
    from .service import Service

UNHEALTHY_AFTER = 60.0
PREFIX = "se_forwarder_coordinator_"


def values(service: Service) -> dict[str, Any]:
    """Everything ``/metrics`` shows, read on the service thread."""
    out, sends = service.output.stats, service.output.sending.stats
    state = service.state
    skipped = dict(service.stats.skipped)
    return {
        "folded": dict(service.stats.folded),
        "skipped": {"not-cloudevent": service.admission.not_cloudevents, "malformed": service.stats.malformed,
                    "late": service.stats.late, "other-type": sum(skipped.values()),
                    "capped": service.stats.dropped},
        "refused": {code: service.refused[code] for code in trust.REASON_CODES},
        "capped": {reason: service.stats.capped.get(reason, 0) for reason in CAPS},
        "decisions": service.decisions_made, "published": out.published,
        "publish_failures": out.publish_failures, "sent": sends.sent, "send_failures": sends.failures,
        "dropped": out.dropped, "leader": int(service.leadership.term is not None),
        "acting": int(service.acting()), "vms": len(state.vms), "open_events": len(state.open_events),
        "queue_conflicts": len(index(state, service.policy).shared_queue),
        "identities": len(state.identities), "waiting": service.gate.held(state),
        "rekeyed": service.gate.registered.get("rekeyed", 0),
        "pending_sends": service.output.sending.pending(),
        "latencies": list(sends.latencies),
        "last_input_age": None if service.last_input is None else time.monotonic() - service.last_input,
        "reach": {name: (r.reachable, r.failures, r.overdue, r.last_success)
                  for name, r in service.reach.items()},
    }


def render(v: dict[str, Any]) -> bytes:
    """Prometheus text exposition of ``values`` (plus the process's CPU and memory)."""
    from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

    class Collector:
        def collect(self) -> Iterator[Any]:
            folded = CounterMetricFamily(PREFIX + "folded", "Hub events folded, by CloudEvent type "
                                         "(com.azure.scheduledevents. left out).", labels=["type"])
            for kind, count in sorted(v["folded"].items()):
                folded.add_metric([kind], count)
            yield folded
            skipped = CounterMetricFamily(PREFIX + "skipped", "Hub events counted and skipped, by why.",
                                          labels=["reason"])
            for reason, count in v["skipped"].items():
                skipped.add_metric([reason], count)
            yield skipped
            refused = CounterMetricFamily(PREFIX + "refused", "Hub events dropped before the fold by "
                                          "trust.py, by reason (its reason table: forged and foreign "
                                          "decisions, unsigned, unregistered, bad-signature and wrong-vm "
                                          "reports, identity-* registrations).", labels=["reason"])
            for reason, count in v["refused"].items():
                refused.add_metric([reason], count)
            yield refused
            capped = CounterMetricFamily(PREFIX + "capped", "What the fold dropped of agents' reports by "
                                         "a [limits] cap or rule (whole reports and parts), by why.",
                                         labels=["reason"])
            for reason, count in v["capped"].items():
                capped.add_metric([reason], count)
            yield capped
            for name, help_text in (
                ("decisions", "Decisions made by this instance."),
                ("published", "Decisions published to the hub by this instance."),
                ("publish_failures", "Failed attempts to publish decisions (retried)."),
                ("sent", "Approval messages sent to the agents' queues."),
                ("send_failures", "Attempts to send an approval message that failed (retried)."),
                ("dropped", "Decisions dropped unpublished because this instance stopped leading."),
                ("rekeyed", "vmIds that registered a new identity key with a newer document (reinstalls)."),
            ):
                yield CounterMetricFamily(PREFIX + name, help_text, value=v[name])
            for name, help_text in (
                ("leader", "1 while this instance holds the leader lease."),
                ("acting", "1 while it leads and has read the hub up to its end (it decides)."),
                ("vms", "VMs in the fold."),
                ("open_events", "Events not completed or canceled."),
                ("queue_conflicts", "VMs whose approval queue another VM's is too (sent no approval)."),
                ("identities", "VMs with a registered identity key."),
                ("waiting", "Reports held until their VM's registration (or an intermediate) arrives."),
                ("pending_sends", "Approval messages waiting to be sent (the queues do not answer)."),
            ):
                yield GaugeMetricFamily(PREFIX + name, help_text, value=v[name])
            reachable = GaugeMetricFamily(PREFIX + "reachable", "1 while the part answers (storage, queues, "
                                          "hub-read, hub-publish).", labels=["part"])
            failures = CounterMetricFamily(PREFIX + "call_failures", "Failed calls to each part, by kind "
                                           "(error, or timeout: no answer by the deadline).",
                                           labels=["part", "kind"])
            success = GaugeMetricFamily(PREFIX + "last_success_timestamp_seconds",
                                        "When a call to the part last succeeded (unix time).",
                                        labels=["part"])
            for part, (ok, failed, overdue, last) in v["reach"].items():
                reachable.add_metric([part], int(ok))
                failures.add_metric([part, "error"], failed - overdue)
                failures.add_metric([part, "timeout"], overdue)
                if last is not None:
                    success.add_metric([part], round(last, 3))
            yield reachable
            yield failures
            yield success
            if v["last_input_age"] is not None:
                yield GaugeMetricFamily(PREFIX + "last_input_age_seconds",
                                        "Seconds since the last event arrived from the hub.",
                                        value=round(v["last_input_age"], 3))
            latencies = v["latencies"]
            yield SummaryMetricFamily(PREFIX + "approval_latency_seconds",
                                      "From the hub input that made an approval possible to its queue "
                                      "message (recent approvals).", count_value=len(latencies),
                                      sum_value=round(sum(latencies), 6))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())  # type: ignore[arg-type]
    ProcessCollector(registry=registry)
    return generate_latest(registry)


def health(service: Service) -> tuple[bool, str]:
    """(healthy, one line): what this instance is doing, and every part that does not answer."""
    down = [r for r in service.reach.values() if not r.reachable]
    where = ", ".join(f"{p}:{s.sequence}" for p, s in sorted(service.positions.items())) or "nothing yet"
    line = f"{service.role}, {len(service.state.vms)} VMs, read up to {where}"
    if not service.acting() and service.leadership.term is not None:
        line += f"; not acting: {service.why_not()}"
    unsigned = service.output.unsigned
    if not down and unsigned is None:
        return True, f"ok: {line}"
    problems = [(r.failing_for(), r.line()) for r in down]
    if unsigned is not None:
        problems.append((time.monotonic() - unsigned[0], f"decisions cannot be signed for "
                         f"{time.monotonic() - unsigned[0]:.0f} s: {unsigned[1]}"))
    worst = max(age for age, _ in problems)
    text = "; ".join(said for _, said in problems)
    if worst > UNHEALTHY_AFTER:
        return False, f"unhealthy: {text}; {line}"
    return True, f"degraded: {text}; {line}"


def describe(service: Service) -> dict[str, Any]:
    """What this instance is and does: the ``service`` member of ``status`` and ``/v1/state``."""
    holder = None if service.leadership.term is not None else service.leadership.holder
    acting = service.acting()
    return {
        "name": service.settings.name, "instance": service.settings.instance, "role": service.role,
        "acting": acting, "notActing": None if acting else service.why_not(), "source": service.source,
        "leader": ({"instance": service.settings.instance, "api": service.leadership.lease.api}
                   if service.leadership.term is not None
                   else {"instance": holder.instance, "api": holder.api} if holder else None),
        "positions": {p: pos.sequence for p, pos in sorted(service.positions.items())},
        "folded": sum(service.stats.folded.values()),
        "skipped": sum(service.stats.skipped.values()) + service.admission.not_cloudevents,
        "refused": {code: service.refused[code] for code in trust.REASON_CODES},
        "waiting": service.gate.held(service.state),
        "decisionsMade": service.decisions_made,
        "pendingSends": service.output.sending.pending(),
        "reachability": {name: r.as_data() for name, r in service.reach.items()},
    }
