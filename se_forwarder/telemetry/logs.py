"""Log records: JSON lines under systemd or when stderr is not a terminal, text on a terminal.

Records carry consistent extra fields (event_id, state, sink, incarnation...): pass them with
``log.info(msg, extra=fields(event_id=...))``. Every line goes through ``redaction.redact``.
Messages carry text from outside (a VM's name, an EventId from the hub): a text line writes its
control characters as escapes (``\x1b``, ``\n``: printable.py), so one record is one line and
nothing in it reaches the terminal as a control sequence; JSON escapes them itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..printable import escape_controls
from ..redaction import redact

FIELDS = ("event_id", "state", "sink", "incarnation", "reason", "rule", "origin")


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
        extra = " ".join(f"{k}={escape_controls(str(getattr(record, k)))}" for k in FIELDS
                         if hasattr(record, k))
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        text = f"{stamp} {record.levelname.lower():<7} {escape_controls(record.getMessage())}"
        if record.exc_info and record.levelno >= logging.ERROR:
            text += f" ({escape_controls(self.formatException(record.exc_info).splitlines()[-1])})"
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
