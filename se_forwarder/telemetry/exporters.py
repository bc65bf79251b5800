"""The metrics and traces exporters (``start``/``shutdown``).

Nothing by default, and then the OpenTelemetry SDK is not even imported. ``prometheus_port`` serves
``/metrics`` and ``/healthz`` on ``prometheus_host``; ``otlp_endpoint`` pushes metrics and traces over
OTLP/HTTP.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any, cast

from .. import metrics, tracing
from ..errors import ConfigError
from .sink_reader import SinkReader

OTLP_TIMEOUT = 5.0  # s per export request
SHUTDOWN_SECONDS = 1.5  # for the last export: SIGTERM must end the agent within 5 s

log = logging.getLogger("se_forwarder.telemetry")

_active: _Exporters | None = None


def start(settings: Any) -> None:
    """Start the configured exporters (none: nothing imported, metrics stay no-ops)."""
    shutdown()
    metrics.reset_polls()
    t = settings.telemetry
    if not t.prometheus_port and not t.otlp_endpoint:
        return
    global _active
    _active = _Exporters(settings)


def shutdown() -> None:
    """Flush and stop the exporters (a last OTLP export), within a couple of seconds."""
    global _active
    active, _active = _active, None
    if active is not None:
        active.close()


def unhealthy_after(settings: Any) -> float:
    """``telemetry.unhealthy_after`` (seconds)."""
    return float(settings.telemetry.unhealthy_after)


def otlp_base(endpoint: str) -> str:
    """The OTLP/HTTP base URL (a ``/v1/metrics`` or ``/v1/traces`` the user added is dropped)."""
    base = endpoint.rstrip("/")
    for tail in ("/v1/metrics", "/v1/traces"):
        if base.endswith(tail):
            base = base[: -len(tail)]
    return base


class _Exporters:
    """The OpenTelemetry providers, their readers/processors and the /metrics endpoint."""

    def __init__(self, settings: Any) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource

        from .. import __version__

        t = settings.telemetry
        host = socket.gethostname()
        resource = Resource.create({"service.name": "se-forwarder",
                                    "service.version": __version__, "host.name": host})
        self.sinks = SinkReader(settings.state.dir, [s.name for s in settings.sinks])
        self.server: Any = None  # metrics_server.MetricsServer
        self.tracer_provider: Any = None
        readers: list[Any] = []
        if t.prometheus_port:
            try:
                from opentelemetry.exporter.prometheus import PrometheusMetricReader
                from prometheus_client import CollectorRegistry, ProcessCollector
            except ImportError as exc:
                raise ConfigError(
                    "telemetry.prometheus_port is set but the Prometheus exporter is not "
                    "installed: pip install 'se-forwarder[prometheus]'") from exc
            from ..metrics_server import MetricsServer  # http.server: ~1 MB, only when serving

            registry = CollectorRegistry(auto_describe=False)
            ProcessCollector(registry=registry)
            threshold = unhealthy_after(settings)
            self.server = MetricsServer(t.prometheus_host, t.prometheus_port, registry,
                                        lambda: metrics.health(threshold, self.sinks))
            readers.append(PrometheusMetricReader(registry=registry, scope_info_enabled=False))
        if t.otlp_endpoint:
            try:
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                    OTLPMetricExporter,
                )
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError as exc:
                if self.server is not None:
                    self.server.close()
                raise ConfigError(
                    "telemetry.otlp_endpoint is set but the OTLP exporter is not installed: "
                    "pip install 'se-forwarder[otlp]'") from exc
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.id_generator import IdGenerator

            base = otlp_base(t.otlp_endpoint)
            readers.append(PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=f"{base}/v1/metrics", timeout=OTLP_TIMEOUT)))
            ids = tracing.DerivedIds()
            # DerivedIds has IdGenerator's methods without subclassing it (tracing imports no SDK).
            self.tracer_provider = TracerProvider(resource=resource, id_generator=cast(IdGenerator, ids),
                                                 shutdown_on_exit=False)
            self.tracer_provider.add_span_processor(BatchSpanProcessor(
                OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=OTLP_TIMEOUT)))
            tracing.enable(self.tracer_provider.get_tracer("se_forwarder", __version__), ids, host)
        self.meter_provider = MeterProvider(metric_readers=readers, resource=resource,
                                            shutdown_on_exit=False)  # close() does it, bounded
        metrics.enable(self.meter_provider.get_meter("se_forwarder", __version__), self.sinks)
        where = [f"Prometheus on http://{self.server.display}/metrics"] if self.server else []
        where += [f"OTLP to {otlp_base(t.otlp_endpoint)}"] if t.otlp_endpoint else []
        log.info("telemetry: %s", ", ".join(where))

    def close(self) -> None:
        metrics.disable()
        tracing.disable()
        if self.server is not None:
            self.server.close()

        def flush() -> None:  # the last OTLP export; an unreachable collector must not hold us
            for provider in (self.meter_provider, self.tracer_provider):
                if provider is not None:
                    try:
                        provider.shutdown()
                    except Exception as exc:  # noqa: BLE001 - best effort at exit
                        log.warning("telemetry shutdown: %s", exc)

        thread = threading.Thread(target=flush, name="telemetry-flush", daemon=True)
        thread.start()
        thread.join(SHUTDOWN_SECONDS)
        if thread.is_alive():
            log.warning("telemetry: the last export did not finish within %.1f s; dropped",
                        SHUTDOWN_SECONDS)
        self.sinks.close()
