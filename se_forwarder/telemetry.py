"""Logging, the metrics/traces exporters, and progress for long waits.

Logs: JSON lines under systemd or when stderr is not a terminal, text on a terminal. Records carry
consistent extra fields (event_id, state, sink, incarnation...): pass them with
``log.info(msg, extra=fields(event_id=...))``. Secrets are never put in records; as a safety net
every line is scrubbed of the secret values this configuration references and of anything shaped
like a connection-string key, a SAS signature, a bearer token or a ``whsec_`` secret.

Exporters (``start``/``shutdown``): nothing by default, and then the OpenTelemetry SDK is not even
imported. ``prometheus_port`` serves ``/metrics`` and ``/healthz`` on ``prometheus_host``;
``otlp_endpoint`` pushes metrics and traces over OTLP/HTTP.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import metrics, tracing
from .errors import ConfigError

if TYPE_CHECKING:
    from .metrics_server import MetricsServer

FIELDS = ("event_id", "state", "sink", "incarnation", "reason", "rule", "origin")
DEFAULT_UNHEALTHY_AFTER = 60.0  # s without a successful poll before /healthz answers 503
OTLP_TIMEOUT = 5.0  # s per export request
SHUTDOWN_SECONDS = 1.5  # for the last export: SIGTERM must end the agent within 5 s

log = logging.getLogger("se_forwarder.telemetry")


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a log call, with only the known, non-None fields."""
    return {k: v for k, v in values.items() if v is not None}


# -- redaction --------------------------------------------------------------------------------------

_PATTERNS = (
    (re.compile(r"whsec_[A-Za-z0-9+/=_-]+"), "whsec_***"),
    # NAME=value where NAME ends in a secret word (AZURE_CLIENT_SECRET, DB_PASSWORD, SIGNING_KEY;
    # not only at a word boundary: ``_`` is a word character, so ``\b`` missed AZURE_CLIENT_SECRET).
    (re.compile(r"(?i)(?<![A-Za-z0-9_])((?:[A-Za-z0-9]+_)*(?:[A-Za-z0-9]*(?:SharedAccessKey|"
                r"SharedAccessSignature|AccountKey|AccessKey|Password|Passwd|Pwd|Secret|Token|"
                r"Credential)s?|sig|[A-Za-z0-9]+_key|apikey))=([^;&\s\"',]+)"), r"\1=***"),
    (re.compile(r"(?i)\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 ***"),
)
_SECRET_KEY = re.compile(r"(?i)key|signature|secret|password|token|sig$")
_MIN_SECRET = 8  # shorter values would redact ordinary words
_secrets: tuple[str, ...] = ()


def redact(text: str) -> str:
    """``text`` with known secret values and secret-shaped substrings replaced by ``***``."""
    for value in _secrets:
        if value in text:
            text = text.replace(value, "***")
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def add_secrets(values: Iterator[str] | list[str] | set[str]) -> None:
    """Never let these values (or, for connection strings, their key parts) into a log line."""
    global _secrets
    found = set(_secrets)
    for value in values:
        value = value.strip()
        if len(value) < _MIN_SECRET:
            continue
        found.add(value)
        if value.startswith("whsec_"):
            found.add(value[len("whsec_"):])
        for part in value.split(";"):
            key, sep, secret = part.partition("=")
            if sep and _SECRET_KEY.search(key.strip()) and len(secret) >= _MIN_SECRET:
                found.add(secret)
    _secrets = tuple(sorted(found, key=len, reverse=True))  # longest first: no partial leftovers


def _walk_secrets(settings: Any) -> tuple[set[str], set[str]]:
    """The environment variable names and the secret values the configuration points at."""
    env_names: set[str] = set()
    values: set[str] = set()

    def walk(obj: Any, key: str = "") -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, str(k))
            if key == "headers":
                values.update(v for v in obj.values() if isinstance(v, str))
        elif isinstance(obj, list):
            for item in obj:
                walk(item, key)
        elif isinstance(obj, str):
            if key == "env" or key.endswith("_env"):
                env_names.add(obj)
            elif key == "file" or (key.endswith("_file") and _SECRET_KEY.search(key)):
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    values.update(Path(obj).read_text(encoding="utf-8").splitlines())

    for sink in settings.sinks:
        walk(sink.options)
    walk(settings.approvals.queue or {})
    return env_names, values


def secret_env_names(settings: Any) -> set[str]:
    """Environment variables holding secrets (kept out of hook commands' environment)."""
    return _walk_secrets(settings)[0] | set(OTLP_HEADER_VARIABLES)


OTLP_HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                         "OTEL_EXPORTER_OTLP_TRACES_HEADERS")


def protect(settings: Any) -> None:
    """Register every secret the configuration points at (``*_env``, ``{env = ..}``, secret files,
    header values) and the OTLP headers from the environment, for ``redact``."""
    env_names, values = _walk_secrets(settings)
    values.update(os.environ.get(name, "") for name in env_names)
    for name in OTLP_HEADER_VARIABLES:
        for item in os.environ.get(name, "").split(","):
            values.add(item.partition("=")[2])
    add_secrets(values)


# -- logging ----------------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key in FIELDS:
            if hasattr(record, key):
                value = getattr(record, key)
                out[key] = redact(value) if isinstance(value, str) else value
        if record.exc_info and record.levelno >= logging.ERROR:
            out["error"] = redact(self.formatException(record.exc_info).splitlines()[-1])
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={getattr(record, k)}" for k in FIELDS if hasattr(record, k))
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        text = f"{stamp} {record.levelname.lower():<7} {record.getMessage()}"
        if record.exc_info and record.levelno >= logging.ERROR:
            text += f" ({self.formatException(record.exc_info).splitlines()[-1]})"
        return redact(f"{text}  [{extra}]" if extra else text)


def choose_format(setting: str) -> str:
    """``json`` or ``text`` for ``auto``: JSON under systemd or when stderr is not a terminal."""
    if setting != "auto":
        return setting
    if os.environ.get("INVOCATION_ID") or os.environ.get("JOURNAL_STREAM"):
        return "json"  # under systemd
    return "text" if sys.stderr.isatty() else "json"


_root_handler: logging.Handler | None = None


def setup_logging(log_format: str = "auto", level: str = "info") -> None:
    """Our records at ``level``; other libraries' warnings through the same (scrubbing) format."""
    global _root_handler
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if choose_format(log_format) == "json" else TextFormatter())
    ours = logging.getLogger("se_forwarder")
    ours.handlers[:] = [handler]
    ours.setLevel(level.upper())
    ours.propagate = False
    root = logging.getLogger()
    if _root_handler is not None:
        root.removeHandler(_root_handler)
    _root_handler = logging.StreamHandler(sys.stderr)
    _root_handler.setFormatter(handler.formatter)
    _root_handler.setLevel(logging.WARNING)
    root.addHandler(_root_handler)
    logging.captureWarnings(True)


# -- progress ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def countdown(logger: logging.Logger, what: str, seconds: float) -> Iterator[None]:
    """While the block runs (up to ``seconds``), log ``what: N s left`` every few seconds."""
    if seconds <= 0:
        yield
        return
    every = min(10.0, max(1.0, seconds / 12))
    began = time.monotonic()
    done = threading.Event()

    def tick() -> None:
        while not done.wait(every):
            left = seconds - (time.monotonic() - began)
            if left < 0.5:
                return
            logger.info("%s: %.0f s left", what, left)

    thread = threading.Thread(target=tick, name="countdown", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


# -- exporters --------------------------------------------------------------------------------------

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

        from . import __version__

        t = settings.telemetry
        host = socket.gethostname()
        resource = Resource.create({"service.name": "se-forwarder",
                                    "service.version": __version__, "host.name": host})
        self.sinks = metrics.SinkReader(settings.state.dir, [s.name for s in settings.sinks])
        self.server: MetricsServer | None = None
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
            from .metrics_server import MetricsServer

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

            base = otlp_base(t.otlp_endpoint)
            readers.append(PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=f"{base}/v1/metrics", timeout=OTLP_TIMEOUT)))
            ids = tracing.DerivedIds()
            self.tracer_provider = TracerProvider(resource=resource, id_generator=ids,
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
