"""pagerduty sink: one PagerDuty alert per scheduled event, through the Events API v2.

``scheduled`` and ``started`` send a ``trigger`` and ``completed`` and ``canceled`` a ``resolve``,
all with the EventId as ``dedup_key`` (``notify/pagerduty.py`` builds the bodies; what pages, the
key and the answers are ``pager.py``'s). The severity is chosen by event type (``severity``, over
``SEVERITY``); the routing key comes from ``routing_key_env`` or ``routing_key_file``.

PagerDuty's answers: ``202`` accepted; ``400`` an invalid event, dead-lettered, except when it
names the routing key, which would refuse every event (the sink parks); ``429`` and 5xx retried;
``401``, ``403`` and ``404`` (not the Events API: check ``url``) park the sink.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..notify.pagerduty import ENQUEUE_URL, SEVERITIES
from ..validation import public_url
from .base import Delivered
from .pager import COMMON_KEYS, PagerOptions, PagerSink, by_event_type, common, secret

if TYPE_CHECKING:
    from ..notify.pager import Page

KNOWN_KEYS = (*COMMON_KEYS, "routing_key_env", "routing_key_file", "severity")
#: The severity of each event type unless ``severity`` says otherwise; an unknown type: UNKNOWN.
SEVERITY = {"Freeze": "info", "Reboot": "warning", "Redeploy": "error", "Preempt": "critical",
            "Terminate": "warning"}
UNKNOWN = "warning"
ROUTING_KEY = re.compile(r"^[A-Za-z0-9]{32}\Z")
PARK_STATUSES = {
    401: "PagerDuty refuses the request: check the routing key",
    403: "PagerDuty refuses the request: check the routing key",
    404: "no Events API v2 at this URL: check url (default https://events.pagerduty.com/v2/enqueue)",
}


@dataclass(frozen=True, kw_only=True)
class PagerDutyOptions(PagerOptions):
    """One ``[[sinks]] type = "pagerduty"`` table, checked."""

    severity: Mapping[str, str] = field(default_factory=lambda: dict(SEVERITY))

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> PagerDutyOptions:
        return cls(**common(table, where, "routing_key", ENQUEUE_URL, KNOWN_KEYS),
                   severity=by_event_type(table, "severity", where, SEVERITIES, SEVERITY))


class PagerDuty:
    """The Events API v2 side of ``PagerSink``."""

    label = "PagerDuty"

    def __init__(self, routing_key: str, severity: Mapping[str, str]) -> None:
        self._routing_key, self._severity = routing_key, dict(severity)

    def request(self, page: Page) -> tuple[str | None, dict[str, str], bytes]:
        from ..notify import pagerduty

        severity = self._severity.get(page.event_type, UNKNOWN)
        body = pagerduty.event(page, self._routing_key, severity)
        return None, {"Content-Type": "application/json"}, json.dumps(body, separators=(",", ":")).encode()

    def refusal(self, status: int, text: str, closing: bool) -> str | Delivered | None:
        if status == 400 and "routing" in text.casefold():
            return ("PagerDuty refuses the routing key, so it would refuse every event: give the "
                    "Integration Key of an Events API v2 integration")
        return PARK_STATUSES.get(status)

    def probe(self) -> tuple[str, str | None]:
        return "OPTIONS", None  # reachable and TLS verified; only an event can check the key

    def probed(self, status: int) -> str | None:
        return None  # any answer: what PagerDuty answers to OPTIONS is not documented


def validate(options: dict[str, Any], where: str) -> PagerDutyOptions:
    """Every key checked cheaply; the routing key is read when the sink is created."""
    return PagerDutyOptions.parse(options, where)


def create(name: str, options: PagerDutyOptions, ctx: Any) -> PagerSink:
    """Read the routing key and check the CA bundle now (a missing one stops the start)."""
    key = secret(options, name, "routing key", ROUTING_KEY,
                 "32 letters and digits (an Events API v2 Integration Key; a REST API key is not one)")
    return PagerSink(name, options, PagerDuty(key, options.severity), key)


def default_name(options: Mapping[str, Any]) -> str:
    return f"pagerduty:{public_url(str(options.get('url', ENQUEUE_URL)))}"
