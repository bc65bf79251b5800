"""Logging setup (JSON lines under systemd or when not on a terminal, text on a terminal).

Log records carry consistent extra fields (event_id, state, sink, incarnation); pass them with
``log.info(msg, extra=fields(event_id=..., ...))``. Secrets are never put in records.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

FIELDS = ("event_id", "state", "sink", "incarnation", "reason", "rule", "origin")

log = logging.getLogger("se_forwarder")


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a log call, with only the known, non-None fields."""
    return {k: v for k, v in values.items() if v is not None}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in FIELDS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info and record.levelno >= logging.ERROR:
            out["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={getattr(record, k)}" for k in FIELDS if hasattr(record, k))
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        text = f"{stamp} {record.levelname.lower():<7} {record.getMessage()}"
        return f"{text}  [{extra}]" if extra else text


def choose_format(setting: str) -> str:
    if setting != "auto":
        return setting
    if os.environ.get("INVOCATION_ID") or os.environ.get("JOURNAL_STREAM"):
        return "json"  # under systemd
    return "text" if sys.stderr.isatty() else "json"


def setup_logging(log_format: str = "auto", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    fmt = choose_format(log_format)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("se_forwarder")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
