"""PagerDuty Events API v2 bodies: an alert's ``trigger`` and its ``resolve``, as pure functions.

Per PagerDuty's reference ("Send an Alert Event", developer.pagerduty.com, Events API v2): one
JSON object POSTed to ``https://events.pagerduty.com/v2/enqueue``, answered ``202`` when accepted.
The body carries ``routing_key`` (the service integration's 32-character key: a secret, so a body
is never logged), ``event_action`` (``trigger``, ``acknowledge`` or ``resolve``) and ``dedup_key``
(at most 255 characters), which ties a resolve to its trigger: a trigger whose key names an open
alert is added to it; once the alert is resolved, a new trigger with that key opens a new alert
and a resolve is dropped. A trigger also carries ``payload`` with ``summary`` (at most 1024
characters), ``source`` (the affected system, e.g. a host name) and ``severity`` (``critical``,
``error``, ``warning``, ``info``); ``timestamp``, ``component``, ``group``, ``class`` and
``custom_details`` are optional; so are the top-level ``client`` and ``client_url``.

The agent's sinks (``sinks/pagerduty.py``) build these from a CloudEvent through ``pager.page_of``;
any other caller (a coordinator alert, with the alert's id as the key) calls ``trigger`` and
``resolve`` directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..printable import strip_controls
from .pager import Page, fit, stable_key

ENQUEUE_URL = "https://events.pagerduty.com/v2/enqueue"
SEVERITIES = ("critical", "error", "warning", "info")
ACTIONS = ("trigger", "acknowledge", "resolve")
SUMMARY_CHARS = 1024
DEDUP_KEY_CHARS = 255
CLIENT = "se-forwarder"


def dedup_key(identifier: str) -> str:
    """``identifier`` (an EventId, an alert id) as a dedup key: itself when it fits, else a digest."""
    return stable_key(identifier, DEDUP_KEY_CHARS)


def trigger(routing_key: str, key: str, summary: str, source: str, severity: str, *,
            timestamp: str | None = None, component: str | None = None, group: str | None = None,
            event_class: str | None = None, custom_details: Mapping[str, Any] | None = None,
            client: str | None = CLIENT) -> dict[str, Any]:
    """The ``trigger`` body for alert ``key`` (used as given when it fits: ``dedup_key``)."""
    if severity not in SEVERITIES:
        raise ValueError(f"severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    payload: dict[str, Any] = {
        "summary": fit(strip_controls(summary).strip() or "Azure maintenance", SUMMARY_CHARS),
        "source": strip_controls(source).strip() or "unknown",
        "severity": severity,
    }
    optional = {"timestamp": timestamp, "component": component, "group": group, "class": event_class}
    payload.update({name: value for name, value in optional.items() if value})
    if custom_details:
        payload["custom_details"] = dict(custom_details)
    body: dict[str, Any] = {"routing_key": routing_key, "event_action": "trigger",
                            "dedup_key": dedup_key(key), "payload": payload}
    if client:
        body["client"] = client
    return body


def resolve(routing_key: str, key: str) -> dict[str, Any]:
    """The ``resolve`` body for alert ``key``."""
    return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": dedup_key(key)}


def event(page: Page, routing_key: str, severity: str) -> dict[str, Any]:
    """The body for an agent's ``Page``: its trigger (with ``severity``) or its resolve."""
    if page.action == "resolve":
        return resolve(routing_key, page.key)
    return trigger(routing_key, page.key, page.summary, page.source, severity,
                   timestamp=page.time or None, group=page.group or None,
                   event_class=page.event_type or None, custom_details=page.details)
