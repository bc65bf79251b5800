"""Traces: one trace per transition, from its observation to each sink's acknowledgement.

The root span ``transition`` runs from the moment the agent observed the change to the moment the
outbox recorded it; under it, one ``deliver`` span per sink runs from the observation to that
sink's acknowledgement (or dead-lettering). Deliveries happen on other threads, maybe after a
restart, so the trace and root span ids are derived from the CloudEvent id (and this host's
name, so two VMs seeing the same event never share ids) rather than carried along: every span of
a transition lands in the same trace, whichever thread or process emits it.

Nothing here imports OpenTelemetry unless ``telemetry.start`` enabled tracing (OTLP configured).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .redaction import redact

if TYPE_CHECKING:
    from .sinks.base import StoredEvent

_tracer: Any = None
_ids: DerivedIds | None = None
_scope = ""  # mixed into the ids: this host, so two VMs never share a trace


def derive(ce_id: str) -> tuple[int, int]:
    """(trace id, root span id) for the transition with CloudEvent id ``ce_id``."""
    digest = hashlib.sha256(f"{_scope}\n{ce_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


class DerivedIds:
    """An OpenTelemetry IdGenerator that hands out pre-set ids while a root span is started."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        self._random = RandomIdGenerator()
        self._local = threading.local()

    def preset(self, ids: tuple[int, int] | None) -> None:
        self._local.ids = ids

    def generate_trace_id(self) -> int:
        ids = getattr(self._local, "ids", None)
        return ids[0] if ids else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        ids = getattr(self._local, "ids", None)
        return ids[1] if ids else self._random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return getattr(self._local, "ids", None) is None


def _ns(unix: float) -> int:
    return int(unix * 1e9)


def recorded(events: Iterable[StoredEvent]) -> None:
    """Root spans for CloudEvents the outbox just recorded (observation -> recorded)."""
    tracer, ids = _tracer, _ids
    if tracer is None or ids is None:
        return
    end = time.time_ns()
    for event in events:
        ids.preset(derive(event.ce_id))
        try:
            span = tracer.start_span(
                "transition", start_time=_ns(event.observed_at), attributes=_attributes(event),
            )
        finally:
            ids.preset(None)
        span.end(end_time=max(end, _ns(event.observed_at)))


def acknowledged(sink: str, batch: Sequence[StoredEvent],
                 done: Sequence[tuple[int, str | None]]) -> None:
    """One ``deliver`` span per handled event: observation -> this sink's acknowledgement."""
    tracer = _tracer
    if tracer is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

    end = time.time_ns()
    for event, (_seq, reason) in zip(batch, done, strict=False):
        trace_id, root_id = derive(event.ce_id)
        parent = trace.set_span_in_context(NonRecordingSpan(SpanContext(
            trace_id, root_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))))
        attributes = {**_attributes(event), "se_forwarder.sink": sink,
                      "se_forwarder.outcome": "delivered" if reason is None else "dead_letter"}
        span = tracer.start_span("deliver", context=parent, start_time=_ns(event.observed_at),
                                 attributes=attributes)
        if reason is not None:
            span.set_status(Status(StatusCode.ERROR, redact(reason)))
        span.end(end_time=max(end, _ns(event.observed_at)))


def _attributes(event: StoredEvent) -> dict[str, str]:
    return {"cloudevents.event_id": event.ce_id, "cloudevents.event_type": event.ce_type,
            "cloudevents.event_subject": event.event_id, "se_forwarder.event_id": event.event_id,
            "se_forwarder.state": event.state}


def enable(tracer: Any, ids: DerivedIds, scope: str) -> None:
    """Emit spans through ``tracer`` (an SDK tracer built with ``ids`` as its id generator)."""
    global _tracer, _ids, _scope
    _tracer, _ids, _scope = tracer, ids, scope


def disable() -> None:
    global _tracer, _ids
    _tracer, _ids = None, None
