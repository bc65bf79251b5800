"""CloudEvent -> ``Page``: what an on-call alert says about one scheduled event, for any pager. Pure.

An agent's transition opens or closes an alert keyed on the EventId, so a consumer sees one alert
per maintenance event however often, and from however many VMs, it is sent:

- ``scheduled``, ``started``: ``trigger`` (a Started event that never showed Scheduled, a hardware
  failure for one, opens the alert itself);
- ``completed``, ``canceled``: ``resolve``;
- anything else (approvals, hooks, heartbeats, identity, decisions): none.

The words are ``describe``'s, as in Teams and Slack: the summary is the notice's title (``web-3
(FD 1, zone 2): Reboot scheduled for 14:30 UTC, in 15 min (Platform)``), the details its facts.
``pagerduty.py`` and ``opsgenie.py`` put a page into each service's body; a coordinator alert
calls their builders with its own id, without a ``Page``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..model import Kind
from ..printable import strip_controls
from .describe import describe

TRIGGERS = (Kind.SCHEDULED, Kind.STARTED)
RESOLVES = (Kind.COMPLETED, Kind.CANCELED)


@dataclass(frozen=True)
class Page:
    """One alert action about one scheduled event, before it is put into a service's body."""

    action: str  # "trigger" or "resolve"
    key: str  # the EventId: the alert's dedup key / alias
    state: str  # scheduled, started, completed or canceled
    summary: str
    source: str  # the VM's name
    event_type: str = ""  # Freeze, Reboot, ... ("" when IMDS gave none)
    event_source: str = ""  # Platform or User
    affects_this_vm: bool = True
    time: str = ""  # when the agent observed it (RFC 3339)
    group: str = ""  # the scale set, else the resource group
    description: str = ""
    details: dict[str, str] = field(default_factory=dict)


def page_of(cloud: Any, now: datetime) -> Page | None:
    """The page for one structured CloudEvent, or None when it opens or closes no alert."""
    if not isinstance(cloud, dict):
        return None
    kind = Kind.of(cloud.get("type"))
    if kind not in TRIGGERS + RESOLVES:
        return None
    data: dict[str, Any] = cloud["data"] if isinstance(cloud.get("data"), dict) else {}
    key = _text(data.get("EventId")) or _text(cloud.get("subject"))
    notice = describe(cloud, now)
    if not key or notice is None:
        return None
    vm: dict[str, Any] = data["Vm"] if isinstance(data.get("Vm"), dict) else {}
    source = _text(vm.get("name")) or _text(cloud.get("source")).rstrip("/").rsplit("/", 1)[-1]
    details = {name: value for name, value in notice.facts}
    details.update({"State": str(kind), "CloudEvent": _text(cloud.get("id"))})
    return Page(
        action="trigger" if kind in TRIGGERS else "resolve",
        key=key, state=str(kind), summary=notice.title, source=source or "unknown VM",
        event_type=_text(data.get("EventType")) or _text(cloud.get("eventtype")),
        event_source=_text(data.get("EventSource")),
        affects_this_vm=data.get("AffectsThisVm") is not False,
        time=_text(cloud.get("time")),
        group=_text(vm.get("vmScaleSetName")) or _text(vm.get("resourceGroupName")),
        description=notice.detail, details={k: v for k, v in details.items() if v},
    )


def stable_key(identifier: str, limit: int) -> str:
    """``identifier`` when it has at most ``limit`` characters, else the same digest every time
    (``se-<sha256 hex>``), so a trigger and its resolve always name one alert."""
    if 0 < len(identifier) <= limit:
        return identifier
    return "se-" + hashlib.sha256(identifier.encode("utf-8")).hexdigest()[: max(1, limit - 3)]


def fit(text: str, limit: int) -> str:
    """At most ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text(value: Any) -> str:
    return strip_controls(value).strip() if isinstance(value, str) else ""
