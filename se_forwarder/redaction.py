"""Secrets never logged: every log line and span is scrubbed of the secret values this configuration
references and of anything shaped like a connection-string key, a SAS signature, a bearer token or
a ``whsec_`` secret.

``protect(settings)`` registers what the configuration points at (``*_env`` variables, ``{env = ..}``
and ``{file = ..}`` values, secret files, header values) and the OTLP headers from the environment;
``redact`` replaces them with ``***``. Used by the log formatters and by tracing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

OTLP_HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                         "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
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
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                walk(v, str(k))
            if key == "headers":
                values.update(v for v in obj.values() if isinstance(v, str))
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name), f.name)
        elif isinstance(obj, list | tuple):
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
    walk(dict(settings.approvals.queue or {}))
    return env_names, values


def secret_env_names(settings: Any) -> set[str]:
    """Environment variables holding secrets (kept out of hook commands' environment)."""
    return _walk_secrets(settings)[0] | set(OTLP_HEADER_VARIABLES)


def protect(settings: Any) -> None:
    """Register every secret the configuration points at (``*_env``, ``{env = ..}``, secret files,
    header values) and the OTLP headers from the environment, for ``redact``."""
    env_names, values = _walk_secrets(settings)
    values.update(os.environ.get(name, "") for name in env_names)
    for name in OTLP_HEADER_VARIABLES:
        for item in os.environ.get(name, "").split(","):
            values.add(item.partition("=")[2])
    add_secrets(values)
