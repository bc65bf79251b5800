"""CloudEvents webhook abuse protection (HTTP 1.1 Web Hooks for Event Delivery, section 4).

Before the first delivery, with ``handshake = true``: an OPTIONS request carrying
``WebHook-Request-Origin``; the receiver must answer 2xx with ``WebHook-Allowed-Origin`` set to that
origin or ``*``. Its ``WebHook-Allowed-Rate`` (requests per minute) then spaces the POSTs (the
``Pacer``). A refusal is retried later; 410 parks the sink.
"""

from __future__ import annotations

import math
import socket
import threading
import time

from ...http_client import HttpError
from ..base import Park, Retry
from .auth import TokenError
from .transport import Endpoint, snippet


def handshake(endpoint: Endpoint) -> Retry | Park | float:
    """The seconds to leave between POSTs (0: no limit) when the receiver agrees, else why not."""
    origin = socket.gethostname() or "se-forwarder"
    try:
        response = endpoint.request(
            "OPTIONS", {**endpoint.headers(), "WebHook-Request-Origin": origin})
    except TokenError as exc:
        return Retry(str(exc))
    except HttpError as exc:
        return endpoint.failure(exc)
    prefix = f"abuse-protection handshake with {endpoint.where} refused"
    if response.status == 410:
        return Park(f"{prefix}: HTTP 410: the endpoint is gone")
    if not 200 <= response.status < 300:
        return Retry(f"{prefix}: HTTP {response.status}{snippet(response.body)}")
    allowed = (response.header("WebHook-Allowed-Origin") or "").strip()
    if allowed not in ("*", origin):
        return Retry(f"{prefix}: WebHook-Allowed-Origin is {allowed or 'missing'!r}, "
                     f"not {origin!r}")
    return interval_from_rate(response.header("WebHook-Allowed-Rate"))


def interval_from_rate(value: str | None) -> float:
    """Seconds between requests for a WebHook-Allowed-Rate (requests per minute; * = no limit)."""
    if not value or value.strip() == "*":
        return 0.0
    try:
        rate = float(value.strip())
    except ValueError:
        return 0.0
    if not math.isfinite(rate) or rate <= 0:
        return 0.0
    # The spec's rate is a whole number of requests per minute: never more than 60 s apart.
    return min(60.0 / rate, 60.0)


class Pacer:
    """Spaces requests by ``interval`` seconds (the allowed rate, or a chat service's pace).

    The interval runs from the end of one request (its reply, or its failure: ``done``) to the start
    of the next. The receiver had a request before its reply left, so it never sees two closer than
    ``interval``, however long one took to reach it (a slow connect on a loaded machine). A wait
    reads the clock again when it ends, so one that ends early never lets a request go too soon.
    """

    def __init__(self, interval: float = 0.0) -> None:
        self.interval = interval
        self._next_slot = 0.0
        self._closed = threading.Event()

    def wait_for_slot(self) -> bool:
        """Wait for the next slot; False when closed meanwhile."""
        if self.interval > 0:
            while (wait := self._next_slot - time.monotonic()) > 0:
                if self._closed.wait(wait):
                    return False
        return not self._closed.is_set()

    def done(self) -> None:
        """The request let go by ``wait_for_slot`` has ended: the next may start ``interval`` from now."""
        self._next_slot = time.monotonic() + self.interval

    def close(self) -> None:
        self._closed.set()
