"""The coordinator's ``/metrics`` (Prometheus text) and ``/healthz`` (200 or 503, one line), as the agent has.

Metric values are read on the service's own thread (``Service.submit``), so a scrape never sees a
half-updated fold. ``/healthz`` is 503 when the hub has not been readable, the storage account not
reachable, or decisions not publishable for ``UNHEALTHY_AFTER`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import azure_view, trust
from .limits import CAPS
from .scopes import index

if TYPE_CHECKING:
    from .service import Service

UNHEALTHY_AFTER = 60.0
PREFIX = "se_forwarder_coordinator_"


def values(service: Service) -> dict[str, Any]:
    """Everything ``/metrics`` shows, read on the service thread."""
    out = service.output.stats
    state = service.state
    skipped = dict(service.stats.skipped)
    return {
        "folded": dict(service.stats.folded),
        "skipped": {"not-cloudevent": service.not_cloudevents, "malformed": service.stats.malformed,
                    "late": service.stats.late, "other-type": sum(skipped.values()),
                    "capped": service.stats.dropped},
        "refused": {code: service.refused[code] for code in trust.REASON_CODES},
        "capped": {reason: service.stats.capped.get(reason, 0) for reason in CAPS},
        "decisions": service.decisions_made, "published": out.published,
        "publish_failures": out.publish_failures, "sent": out.sent, "send_failures": out.send_failures,
        "dropped": out.dropped, "leader": int(service.leadership.term is not None),
        "acting": int(service.acting()), "vms": len(state.vms), "open_events": len(state.open_events),
        "queue_conflicts": len(index(state, service.policy).shared_queue),
        "latencies": list(out.latencies),
        "last_input_age": None if service.last_input is None else time.monotonic() - service.last_input,
        "azure": _azure(service),
    }


def _azure(service: Service) -> dict[str, Any] | None:
    """Azure's input: what came in (by what happened to it), agentless VMs, findings by field."""
    if service.azure is None:
        return None
    idx = index(service.state, service.policy)
    by_field: dict[str, int] = {}
    for finding in azure_view.findings(service.state, idx):
        field = "tag" if finding["field"].startswith("tag:") else finding["field"]
        by_field[field] = by_field.get(field, 0) + 1
    return {"counts": dict(service.azure.counts), "agentless": len(azure_view.agentless(service.state, idx)),
            "vms": len(service.state.azure.vms), "findings": by_field}


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
                                          "trust.py, by reason: forged (a decision in this coordinator's "
                                          "name that does not verify), foreign (another coordinator's).",
                                          labels=["reason"])
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
                ("send_failures", "Approval messages that could not be sent."),
                ("dropped", "Decisions dropped unpublished because this instance stopped leading."),
            ):
                yield CounterMetricFamily(PREFIX + name, help_text, value=v[name])
            for name, help_text in (
                ("leader", "1 while this instance holds the leader lease."),
                ("acting", "1 while it leads and has read the hub up to its end (it decides)."),
                ("vms", "VMs in the fold."),
                ("open_events", "Events not completed or canceled."),
                ("queue_conflicts", "VMs whose approval queue another VM's is too (sent no approval)."),
            ):
                yield GaugeMetricFamily(PREFIX + name, help_text, value=v[name])
            if v["last_input_age"] is not None:
                yield GaugeMetricFamily(PREFIX + "last_input_age_seconds",
                                        "Seconds since the last event arrived from the hub.",
                                        value=round(v["last_input_age"], 3))
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


def health(service: Service) -> tuple[bool, str]:
    """(healthy, one line)."""
    now = time.monotonic()
    reader = service.reader.health if service.reader is not None else None
    if reader is not None and reader.last_error_at is not None:
        since = reader.last_batch if reader.last_batch is not None else service.started
        if reader.last_error_at > since and now - since > UNHEALTHY_AFTER:
            return False, f"the Event Hub has not been readable for {now - since:.0f} s: {reader.errors[-1]}"
    failing = service.leadership.failing_since
    if failing is not None and now - failing > UNHEALTHY_AFTER:
        return False, (f"the storage account has failed for {now - failing:.0f} s (leader lease): "
                       f"{service.leadership.last_error}")
    out = service.output.stats
    if out.failing_since is not None and now - out.failing_since > UNHEALTHY_AFTER:
        return False, f"decisions have not been publishable for {now - out.failing_since:.0f} s: " \
                      f"{out.last_publish_error}"
    where = ", ".join(f"{p}:{s.sequence}" for p, s in sorted(service.positions.items())) or "nothing yet"
    return True, f"ok: {service.role}, {len(service.state.vms)} VMs, read up to {where}"
