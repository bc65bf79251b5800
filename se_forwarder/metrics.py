"""Metrics operators graph and alert on, with small, fixed label sets (never one series per event).

The recording functions below are what the agent calls. While no exporter is configured they only
update two numbers the health check reads and return: the OpenTelemetry SDK is not even imported
(this agent runs on every VM; its idle cost is benchmarked against a plain polling loop).
``telemetry.start`` calls ``enable`` with a real meter when ``prometheus_port`` or ``otlp_endpoint``
is set. ``METRICS`` lists every instrument; the README table is made from it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .event_fields import FIELDS as EVENT_FIELDS
from .model import TRANSITIONS, VERDICTS, Kind

if TYPE_CHECKING:
    from .sinks.base import StoredEvent
    from .telemetry.sink_reader import SinkReader, SinkState

log = logging.getLogger("se_forwarder.telemetry")

# -- the catalogue ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricInfo:
    """One instrument: its OpenTelemetry name, kind, unit, labels, and what it counts."""

    name: str
    kind: str  # counter | histogram | gauge
    unit: str  # UCUM, as OpenTelemetry wants it; {annotations} are dropped by Prometheus
    labels: tuple[str, ...]
    description: str

    @property
    def prometheus_name(self) -> str:
        """The series name on /metrics (OpenTelemetry's Prometheus translation)."""
        base = self.name.replace(".", "_")
        suffix = {"s": "_seconds"}.get(self.unit, "")
        if suffix and not base.endswith(suffix):
            base += suffix
        return base + ("_total" if self.kind == "counter" else "")


POLL_ERROR_REASONS = {  # ImdsError.reason (and "state") -> the label operators expect
    "timeout": "timeout", "connection": "connection", "throttled": "429", "server": "5xx",
    "client": "4xx", "malformed": "malformed", "state": "state",
}
TRANSITION_TYPES = tuple(str(k) for k in (*TRANSITIONS, Kind.APPROVED, Kind.RECOVERED))
DELIVERY_OUTCOMES = ("delivered", "dead_letter", "retry", "parked")
APPROVAL_ORIGINS = ("policy", "hook", "coordinator", "cli")
APPROVAL_OUTCOMES = ("approved", "rejected", "failed", "dry_run")
HOOKS = ("prepare", "recover")
HOOK_OUTCOMES = ("ok", "failed", "timeout", "interrupted", "error")
HOOK_ALIASES = {"succeeded": "ok", "timed-out": "timeout"}  # approvals.hooks' state names
OTHER = "other"  # any value outside a fixed set: the series count stays bounded whatever callers pass

METRICS: tuple[MetricInfo, ...] = (
    MetricInfo("se_forwarder.imds.polls", "counter", "{poll}", (),
               "Scheduled-events polls attempted (successful or not)."),
    MetricInfo("se_forwarder.imds.poll_errors", "counter", "{poll}", ("reason",),
               "Failed polls by reason: timeout, connection, 429, 5xx, 4xx, malformed, state "
               "(the outbox could not record the document)."),
    MetricInfo("se_forwarder.imds.request.duration", "histogram", "s", ("outcome",),
               "Time IMDS took to answer a poll; outcome ok or error."),
    MetricInfo("se_forwarder.imds.unreadable_fields", "counter", "{field}", ("field",),
               "Event fields the agent could not read, once per event (the event is kept)."),
    MetricInfo("se_forwarder.imds.incarnation", "gauge", "{incarnation}", (),
               "DocumentIncarnation of the last document received."),
    MetricInfo("se_forwarder.imds.last_success", "gauge", "s", (),
               "Unix time of the last successful poll (alert on time() minus this)."),
    MetricInfo("se_forwarder.transitions", "counter", "{transition}", ("type",),
               "Transitions recorded in the outbox, by type: scheduled, started, completed, "
               "canceled, approved, recovered."),
    MetricInfo("se_forwarder.deliveries", "counter", "{event}", ("sink", "outcome"),
               "Delivery results per sink: delivered, dead_letter (per event); retry, parked "
               "(per failed attempt)."),
    MetricInfo("se_forwarder.delivery.latency", "histogram", "s", ("sink",),
               "From the agent observing a transition to the sink acknowledging its CloudEvent."),
    MetricInfo("se_forwarder.dead_letters", "counter", "{event}", ("sink",),
               "CloudEvents a sink refused for good (kept in the outbox with the reason)."),
    MetricInfo("se_forwarder.outbox.backlog", "gauge", "{event}", ("sink",),
               "CloudEvents in the outbox not yet acknowledged by the sink."),
    MetricInfo("se_forwarder.outbox.oldest_age", "gauge", "s", ("sink",),
               "Age of the oldest CloudEvent the sink has not acknowledged (0 when none)."),
    MetricInfo("se_forwarder.sink.parked", "gauge", "1", ("sink",),
               "1 while the sink is parked (its endpoint answered 410 Gone), else 0."),
    MetricInfo("se_forwarder.approvals", "counter", "{approval}", ("origin", "outcome"),
               "Approval attempts by origin (policy, hook, coordinator, cli) and outcome "
               "(approved, rejected, failed, dry_run)."),
    MetricInfo("se_forwarder.hook.runs", "counter", "{run}", ("hook", "outcome"),
               "prepare/recover hook runs by outcome: ok, failed (non-zero exit), timeout, "
               "interrupted (the agent stopped while it ran), error (could not start)."),
    MetricInfo("se_forwarder.health.verdict", "gauge", "1", ("verdict",),
               "The [health] probes' verdict on this VM's application: 1 for the current one of "
               "healthy, unhealthy, unknown, 0 for the others (absent without [health])."),
    MetricInfo("se_forwarder.health.probes", "counter", "{check}", ("probe", "outcome"),
               "[health] probe checks by probe name and outcome: pass, fail."),
    MetricInfo("se_forwarder.enrichment.complete", "gauge", "1", (),
               "1 when events carry the VM's identity from the instance metadata, 0 while they "
               "carry only the host name (the instance metadata has not answered yet)."),
)
BY_NAME = {m.name: m for m in METRICS}
IMDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                130.0)
DELIVERY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
                    3600.0, 21600.0)


def label(value: str | None, allowed: Iterable[str]) -> str:
    """``value`` if it is one of ``allowed``, else ``other``."""
    return value if value is not None and value in allowed else OTHER


# -- what the health check reads (kept even with no exporter: two assignments a poll) ------------


class PollState:
    """Last poll outcome, for /healthz and the incarnation gauge."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.last_ok: float | None = None  # monotonic
        self.last_ok_wall: float | None = None  # unix time
        self.last_error: str | None = None
        self.incarnation: int | None = None
        self.enrichment_complete: bool | None = None  # None: no agent identity yet
        self.health: str | None = None  # the [health] verdict (None: no [health])


polls = PollState()

# -- recording (called by the agent, the delivery workers and the approver) ------------------------

_instruments: _Instruments | None = None


def poll_succeeded(incarnation: int, seconds: float) -> None:
    """A document was received (``seconds``: how long IMDS took)."""
    polls.last_ok = time.monotonic()
    polls.last_ok_wall = time.time()
    polls.incarnation = incarnation
    polls.last_error = None
    inst = _instruments
    if inst is not None:
        inst.polls.add(1)
        inst.imds_duration.record(seconds, {"outcome": "ok"})


def unreadable_field(name: str) -> None:
    """A field of an event that could not be read (the poller calls this once per event)."""
    if (inst := _instruments) is not None:
        inst.unreadable_fields.add(1, {"field": label(name, EVENT_FIELDS)})


def enrichment(complete: bool) -> None:
    """Whether events carry the identity from the instance metadata (else only the host name)."""
    polls.enrichment_complete = complete


def poll_failed(reason: str, seconds: float | None = None) -> None:
    """A poll failed; ``reason`` is an ``ImdsError.reason`` or ``state``."""
    polls.last_error = POLL_ERROR_REASONS.get(reason, OTHER)
    inst = _instruments
    if inst is not None:
        inst.polls.add(1)
        inst.poll_errors.add(1, {"reason": polls.last_error})
        if seconds is not None:
            inst.imds_duration.record(seconds, {"outcome": "error"})


def transitions(events: Iterable[StoredEvent]) -> None:
    """CloudEvents just recorded in the outbox (only new ones: the outbox dedups)."""
    inst = _instruments
    if inst is not None:
        for event in events:
            inst.transitions.add(1, {"type": label(event.state, TRANSITION_TYPES)})


def acknowledged(sink: str, batch: Sequence[StoredEvent],
                 done: Sequence[tuple[int, str | None]]) -> None:
    """``done`` (seq, dead-letter reason or None) is the handled prefix of ``batch``, just acked."""
    inst = _instruments
    if inst is None:
        return
    now = time.time()
    for event, (_seq, reason) in zip(batch, done, strict=False):
        if reason is None:
            inst.deliveries.add(1, {"sink": sink, "outcome": "delivered"})
            inst.delivery_latency.record(max(0.0, now - event.observed_at), {"sink": sink})
        else:
            inst.deliveries.add(1, {"sink": sink, "outcome": "dead_letter"})
            inst.dead_letters.add(1, {"sink": sink})


def delivery_failed(sink: str, outcome: str) -> None:
    """A delivery attempt ended in ``retry`` or ``parked``."""
    inst = _instruments
    if inst is not None:
        inst.deliveries.add(1, {"sink": sink, "outcome": label(outcome, DELIVERY_OUTCOMES)})


def approval(origin: str, outcome: str) -> None:
    """An approval attempt. ``origin`` may be an ApprovedBy value (``policy:<rule>``...): only the
    part before ``:`` is kept, so rule names and coordinator sources never become labels."""
    inst = _instruments
    if inst is not None:
        inst.approvals.add(1, {"origin": label(origin.partition(":")[0], APPROVAL_ORIGINS),
                               "outcome": label(outcome, APPROVAL_OUTCOMES)})


def hook_run(hook: str, outcome: str) -> None:
    """A prepare/recover hook finished with ``outcome`` (ok, failed, timeout, interrupted, error;
    the hook runner's own state names succeeded/timed-out are accepted). ``none`` (no command
    configured) is not a run and is not counted."""
    inst = _instruments
    if inst is not None and outcome != "none":
        outcome = HOOK_ALIASES.get(outcome, outcome)
        inst.hook_runs.add(1, {"hook": label(hook, HOOKS), "outcome": label(outcome, HOOK_OUTCOMES)})


def app_health(verdict: str) -> None:
    """The ``[health]`` probes' verdict changed (or was first formed)."""
    polls.health = verdict


def probe_result(probe: str, passed: bool) -> None:
    """One ``[health]`` probe check (probe names come from the configuration: a bounded set)."""
    if (inst := _instruments) is not None:
        inst.probes.add(1, {"probe": probe, "outcome": "pass" if passed else "fail"})


# -- health ---------------------------------------------------------------------------------------


def health(threshold: float, sinks: SinkReader | None) -> tuple[bool, str]:
    """(healthy, one line): the last poll succeeded within ``threshold`` s and no sink is parked."""
    now = time.monotonic()
    if polls.last_ok is None:
        waited = now - polls.started
        if waited > threshold:
            why = f"last error: {polls.last_error}" if polls.last_error else "IMDS has not answered"
            return False, (f"no successful IMDS poll in the {waited:.0f} s since start ({why}); "
                           "run `se-forwarder check` on this VM")
    else:
        age = now - polls.last_ok
        if age > threshold:
            return False, (f"last successful IMDS poll {age:.0f} s ago (threshold {threshold:g} s, "
                           f"last error: {polls.last_error or 'none'}); run `se-forwarder check`")
    states = sinks.snapshot() if sinks is not None else []
    for s in states:
        if s.parked:
            return False, (f"sink {s.name} is parked ({s.parked}); fix the endpoint, then "
                           f"`se-forwarder sink resume {s.name}`")
    # A warning, never a reason to be unhealthy: events are forwarded with the host name.
    warning = ("; warning: instance metadata not read yet, events carry the host name as the VM "
               "name" if polls.enrichment_complete is False else "")
    if polls.last_ok is None:
        return True, "ok: starting, waiting for the first IMDS answer" + warning
    return True, (f"ok: last poll {now - polls.last_ok:.1f} s ago, incarnation {polls.incarnation}, "
                  f"{len(states)} sink(s) delivering{warning}")


# -- the SDK side (only reached when an exporter is configured) ------------------------------------


class _Instruments:
    def __init__(self, meter: Any, sinks: SinkReader) -> None:
        def counter(name: str) -> Any:
            m = BY_NAME[name]
            return meter.create_counter(m.name, unit=m.unit, description=m.description)

        def histogram(name: str, buckets: Sequence[float]) -> Any:
            m = BY_NAME[name]
            return meter.create_histogram(m.name, unit=m.unit, description=m.description,
                                          explicit_bucket_boundaries_advisory=list(buckets))

        def gauge(name: str, callback: Callable[[Any], Iterable[Any]]) -> Any:
            m = BY_NAME[name]
            return meter.create_observable_gauge(m.name, callbacks=[callback], unit=m.unit,
                                                 description=m.description)

        from opentelemetry.metrics import Observation

        def per_sink(value: Callable[[SinkState], float]) -> Callable[[Any], Iterable[Any]]:
            return lambda _options: [Observation(value(s), {"sink": s.name})
                                     for s in sinks.snapshot()]

        def scalar(value: Callable[[], float | None]) -> Callable[[Any], Iterable[Any]]:
            def observe(_options: Any) -> list[Any]:
                v = value()
                return [] if v is None else [Observation(v)]
            return observe

        self.polls = counter("se_forwarder.imds.polls")
        self.poll_errors = counter("se_forwarder.imds.poll_errors")
        self.unreadable_fields = counter("se_forwarder.imds.unreadable_fields")
        self.imds_duration = histogram("se_forwarder.imds.request.duration", IMDS_BUCKETS)
        self.transitions = counter("se_forwarder.transitions")
        self.deliveries = counter("se_forwarder.deliveries")
        self.delivery_latency = histogram("se_forwarder.delivery.latency", DELIVERY_BUCKETS)
        self.dead_letters = counter("se_forwarder.dead_letters")
        self.approvals = counter("se_forwarder.approvals")
        self.hook_runs = counter("se_forwarder.hook.runs")
        self.probes = counter("se_forwarder.health.probes")
        # Series that exist from the start at 0, so rate() and alerts work before the first event.
        for reason in sorted(set(POLL_ERROR_REASONS.values())):
            self.poll_errors.add(0, {"reason": reason})
        for name in EVENT_FIELDS:
            self.unreadable_fields.add(0, {"field": name})
        for kind in TRANSITION_TYPES:
            self.transitions.add(0, {"type": kind})
        for name in sinks.names:
            for outcome in DELIVERY_OUTCOMES:
                self.deliveries.add(0, {"sink": name, "outcome": outcome})
            self.dead_letters.add(0, {"sink": name})
        self.observables = [
            gauge("se_forwarder.imds.incarnation", scalar(lambda: polls.incarnation)),
            gauge("se_forwarder.imds.last_success", scalar(lambda: polls.last_ok_wall)),
            gauge("se_forwarder.outbox.backlog", per_sink(lambda s: s.backlog)),
            gauge("se_forwarder.outbox.oldest_age", per_sink(lambda s: round(s.oldest_age, 3))),
            gauge("se_forwarder.sink.parked", per_sink(lambda s: 1 if s.parked else 0)),
            gauge("se_forwarder.health.verdict", lambda _options: [] if polls.health is None else [
                Observation(int(polls.health == v), {"verdict": v}) for v in VERDICTS]),
            gauge("se_forwarder.enrichment.complete", scalar(
                lambda: None if polls.enrichment_complete is None
                else int(polls.enrichment_complete))),
        ]


def enable(meter: Any, sinks: SinkReader) -> None:
    """Record into ``meter`` (an OpenTelemetry SDK meter) from now on."""
    global _instruments
    _instruments = _Instruments(meter, sinks)


def disable() -> None:
    """Back to the no-op (after the meter provider was shut down)."""
    global _instruments
    _instruments = None


def reset_polls() -> None:
    """Forget the poll history (a new agent run in this process)."""
    global polls
    polls = PollState()
