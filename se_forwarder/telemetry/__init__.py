"""Logging, the metrics/traces exporters, and progress for long waits.

- ``logs``: JSON or text records with consistent extra fields (``fields``), ``setup_logging``,
  ``countdown`` for long waits;
- ``exporters``: Prometheus ``/metrics`` and ``/healthz``, OTLP/HTTP metrics and traces, none by
  default (then the OpenTelemetry SDK is not imported);
- secrets are scrubbed from every line by ``se_forwarder.redaction``, re-exported here.
"""

from __future__ import annotations

from ..redaction import OTLP_HEADER_VARIABLES, add_secrets, protect, redact, secret_env_names
from .exporters import otlp_base, shutdown, start, unhealthy_after
from .logs import FIELDS, JsonFormatter, TextFormatter, choose_format, countdown, fields, setup_logging

__all__ = [
    "FIELDS", "OTLP_HEADER_VARIABLES", "JsonFormatter", "TextFormatter",
    "add_secrets", "choose_format", "countdown", "fields", "otlp_base", "protect", "redact",
    "secret_env_names", "setup_logging", "shutdown", "start", "unhealthy_after",
]
