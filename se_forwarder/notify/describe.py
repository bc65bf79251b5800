"""CloudEvent -> Notice: what a person should read about one event, in one short line and a few facts.

Pure: the event (structured-mode CloudEvent as a dict) and the clock come in, a ``Notice`` comes out;
nothing is sent. Rules:

- A title says who, what and when: ``web-3 (FD 1, zone 2): Reboot scheduled for 14:30 UTC, in 15 min
  (Platform)``. Times are UTC; a relative time is measured from ``now`` (the moment of sending).
- ``completed after 4 min`` only when the start is known (``started_at``, the ``time`` of the
  ``started`` event that came before); otherwise nothing is claimed. Inferred transitions say so.
- Heartbeats are not chat messages: ``describe`` returns None for them.
- Coordinator decisions (``com.azure.scheduledevents.coordinator.<action>``) read the ``data`` the
  coordinator publishes (fleet/coordinator/decide/events.py): ``EventId``, ``EventType``, ``NotBeforeUtc``,
  ``Resources`` (else the names in ``Affected``), ``Target.name`` (the VM an approval was sent to),
  ``Scope``, ``ReasonCode``, ``Reason``, ``Actor``, ``Shadow`` and ``Budgets``
  (``[{"scope", "kind", "size", "used", "withEvent", "max"}]``). The use shown is the count after the
  decision: ``withEvent`` for an approval (``group web, 1/1 used``), the event's own VMs for a breach
  (``zone 2: 4 at once, max 1``), ``used`` otherwise. Scope keys are shortened for people:
  ``group:set/<sub>/<rg>/web`` reads ``group web``, ``fault_domain:<group>/1`` ``FD 1 of group web``.
- Defensive: a missing or mistyped field is left out, never an exception; an unknown type still gets
  a generic line.
"""

from __future__ import annotations

import email.utils
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..model import TYPE_PREFIX, Kind

PREFIX = TYPE_PREFIX
COORDINATOR = PREFIX + "coordinator."
HEARTBEAT = Kind.HEARTBEAT.type
TITLE_CHARS = 300
VALUE_CHARS = 500
DETAIL_CHARS = 2000
LISTED_VMS = 3

# Colours both chat formats understand (Adaptive Card TextBlock colours).
DEFAULT, GOOD, WARNING, ATTENTION = "Default", "Good", "Warning", "Attention"

_SCOPE_WORDS = {
    "group": "group", "scale_set": "scale set", "zone": "zone", "fault_domain": "FD",
    "update_domain": "UD", "resource_group": "resource group", "tag": "tag",
}
_APPROVERS = {"hook": "the prepare hook", "cli": "the CLI"}
_INFERRED = {
    "approved": "inferred: approved, then gone from the document",
    "not-before-passed": "inferred: NotBefore passed, then gone from the document",
    "not-before-unknown": "inferred: gone from the document, NotBefore unreadable",
}


@dataclass(frozen=True)
class Notice:
    """A chat message before it is put into a format."""

    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    detail: str = ""
    footer: str = ""
    tone: str = DEFAULT


def describe(event: Any, now: datetime, started_at: datetime | None = None) -> Notice | None:
    """The notice for one CloudEvent, or None when it is not for people (heartbeats)."""
    if not isinstance(event, dict):
        return Notice(title="se-forwarder: an event that is not a JSON object", tone=WARNING)
    kind = _text(event.get("type"))
    if kind == HEARTBEAT:
        return None
    data: dict[str, Any] = event["data"] if isinstance(event.get("data"), dict) else {}
    footer = " · ".join(p for p in ("se-forwarder", _cut(_text(event.get("id")), 200)) if p)
    if kind.startswith(COORDINATOR):
        return _decision(kind[len(COORDINATOR):], data, now, footer)
    state = kind[len(PREFIX):] if kind.startswith(PREFIX) else ""
    return _agent_event(state, kind, event, data, now, started_at, footer)


# -- agent events -----------------------------------------------------------------------------------


def _agent_event(state: str, kind: str, event: dict, data: dict, now: datetime,
                 started_at: datetime | None, footer: str) -> Notice:
    vm = _vm_label(event, data)
    etype = _text(data.get("EventType")) or _text(event.get("eventtype")) or "event"
    not_before = parse_time(data.get("NotBeforeUtc")) or parse_time(data.get("NotBefore"))
    source = _text(data.get("EventSource"))
    reason = _cut(_text(data.get("Reason")), TITLE_CHARS // 2)
    inferred = _INFERRED.get(_text(data.get("InferredFrom")), "inferred") if data.get("Inferred") is True \
        else ""
    tone = DEFAULT
    if state == Kind.SCHEDULED:
        when = f" for {when_text(not_before, now)}, {relative(not_before, now)}" if not_before else ""
        line = f"{etype} scheduled{when}" + (f" ({source})" if source else "")
        tone = WARNING
    elif state == Kind.STARTED:
        line = f"{etype} started" + (f" ({inferred})" if inferred else "")
        tone = ATTENTION
    elif state == Kind.COMPLETED:
        ended = parse_time(event.get("time"))
        took = ""
        if started_at and ended and not inferred and ended >= started_at:
            took = f" after {duration((ended - started_at).total_seconds())}"
        line = f"{etype} completed{took}" + (f" ({inferred})" if inferred else "")
        tone = GOOD
    elif state == Kind.CANCELED:
        line = f"{etype} canceled" + (f" (was due {when_text(not_before, now)})" if not_before else "")
        tone = GOOD
    elif state == Kind.APPROVED:
        line = f"{etype} approved by {approver(_text(data.get('ApprovedBy')))}"
    elif state == Kind.PREPARED:
        hook_seconds = _number(data.get("DurationSeconds"))
        line = f"ready for {etype}" + (f" (prepare hook took {duration(hook_seconds)})"
                                       if hook_seconds is not None else "")
    elif state == Kind.PREPARE_FAILED:
        line = f"prepare hook failed for {etype}" + (f": {reason}" if reason else "")
        tone = ATTENTION
    elif state == Kind.RECOVER_FAILED:
        line = f"recover hook failed after {etype}" + (f": {reason}" if reason else "")
        tone = ATTENTION
    elif state == Kind.RECOVERED:
        back = _number(data.get("RecoveredAfterSeconds"))
        line = f"back after {etype}" + (f", {duration(back)} after it ended" if back is not None else "")
        tone = GOOD
    elif state == Kind.APPROVAL_REJECTED:
        what = etype if etype != "event" else f"event {_text(event.get('subject')) or 'unknown'}"
        line = f"approval message refused for {what}" + (f": {reason}" if reason else "")
        tone = WARNING
    else:
        line = f"{kind or 'an event without a type'}" + (f" ({etype})" if etype != "event" else "")
    facts = _agent_facts(event, data, not_before)
    detail = _cut(_text(data.get("Description")), DETAIL_CHARS)
    return Notice(_cut(f"{vm}: {line}", TITLE_CHARS), facts, detail, footer, tone)


def _vm_label(event: dict, data: dict) -> str:
    vm: dict[str, Any] = data["Vm"] if isinstance(data.get("Vm"), dict) else {}
    name = _text(vm.get("name")) or _text(event.get("source")).rstrip("/").rsplit("/", 1)[-1] or "a VM"
    where = [f"FD {fd}" for fd in [_text(vm.get("platformFaultDomain"))] if fd]
    where += [f"zone {zone}" for zone in [_text(vm.get("zone"))] if zone]
    return f"{name} ({', '.join(where)})" if where else name


def _agent_facts(event: dict, data: dict, not_before: datetime | None) -> list[tuple[str, str]]:
    vm: dict[str, Any] = data["Vm"] if isinstance(data.get("Vm"), dict) else {}
    seconds = _number(data.get("DurationInSeconds"))
    kind = _text(data.get("EventType"))
    if kind and seconds is not None and seconds > 0:
        kind += f", up to {duration(seconds)}"
    domains = " / ".join(f"{label} {value}" for label, value in (
        ("FD", _text(vm.get("platformFaultDomain"))), ("UD", _text(vm.get("platformUpdateDomain"))),
    ) if value)
    facts = [
        ("Event", _text(data.get("EventId")) or _text(event.get("subject"))),
        ("Type", kind),
        ("Status", _text(event.get("eventstatus")) or _text(data.get("EventStatus"))),
        ("Not before", full_time(not_before) if not_before else ""),
        ("Source", _text(data.get("EventSource"))),
        ("Resources", vm_list(data.get("Resources"), 10)),
        ("Domains", domains),
        ("Scale set", _text(vm.get("vmScaleSetName"))),
        ("Resource group", _text(vm.get("resourceGroupName"))),
        ("Approved by", _text(data.get("ApprovedBy"))),
        ("Reason", _text(data.get("Reason"))),
        ("Observed", full_time(parse_time(event.get("time")))),
    ]
    return [(name, _cut(value, VALUE_CHARS)) for name, value in facts if value]


def approver(who: str) -> str:
    """``policy:freeze-short`` -> ``policy rule freeze-short``; ``coordinator:x`` -> ``the coordinator
    (x)``."""
    if not who:
        return "someone (not recorded)"
    kind, _, rest = who.partition(":")
    if kind == "policy" and rest:
        return f"policy rule {rest}"
    if kind == "coordinator":
        return f"the coordinator ({rest})" if rest else "the coordinator"
    return _APPROVERS.get(who, who)


# -- coordinator decisions --------------------------------------------------------------------------


def _decision(action: str, data: dict, now: datetime, footer: str) -> Notice:
    etype = _text(data.get("EventType")) or "maintenance"
    target: dict[str, Any] = data["Target"] if isinstance(data.get("Target"), dict) else {}
    sent_to = _text(target.get("name"))
    if data.get("Via") == "arm" and sent_to:  # approved through the Maintenance acknowledge
        sent_to = f"Azure (acknowledge on {sent_to})"
    resources = data.get("Resources") if isinstance(data.get("Resources"), list) and data.get("Resources") \
        else _affected_names(data.get("Affected"))
    vms = vm_list(resources, LISTED_VMS) or sent_to or "unknown VMs"
    not_before = parse_time(data.get("NotBeforeUtc"))
    budgets = budget_text(data.get("Budgets"), action)
    reason = _cut(_text(data.get("Reason")), TITLE_CHARS // 2)
    actor = _text(data.get("Actor"))
    scope = scope_label(_text(data.get("Scope"))) or "all approvals"
    by = f" by {actor}" if actor and actor != "coordinator" else ""
    because = f": {reason}" if reason else ""
    what = f"{etype} for {vms}"
    tone = DEFAULT
    if action == "approve":
        line = f"Coordinator approved {what}" + (f" ({budgets})" if budgets else "")
        if actor and actor != "coordinator":
            line += f"{by}{because}"
        tone = GOOD
    elif action == "defer":
        line = f"Coordinator deferred {what}{because}"
    elif action == "breach":
        when = f" at {when_text(not_before, now)}, {relative(not_before, now)}" if not_before else ""
        line = f"Breach ahead: {what}{when}" + (f" ({budgets})" if budgets else "") + because
        tone = ATTENTION
    elif action == "pause":
        line, tone = f"Coordinator paused {scope}{by}{because}", WARNING
    elif action == "resume":
        line, tone = f"Coordinator resumed {scope}{by}{because}", GOOD
    elif action == "hold":
        line, tone = f"Coordinator holds {what}{by}{because}", WARNING
    elif action == "release":
        line, tone = f"Coordinator released {what}{by}{because}", GOOD
    elif action == "gate":  # a gate closed or opened (fleet/coordinator/output/chat_gates.py)
        gate, opened = _text(data.get("Gate")), data.get("Open") is True
        line = f"Gate {gate} is open again: early approval in {scope} goes on" if opened else \
            f"Gate {gate} closed: no early approval in {scope}{because}"
        tone = GOOD if opened else WARNING
    elif action == "acknowledge":
        answered = _text(data.get("ReasonCode"))
        line = f"Azure {'approved' if answered == 'approved' else 'refused'} {what}{because}"
        tone = GOOD if answered == "approved" else ATTENTION
    else:
        line = f"Coordinator {action or 'decision'}: {what}{because}"
    shadow = data.get("Shadow") is True
    if shadow:
        line = "[shadow] " + line
    facts = [
        ("Event", _text(data.get("EventId"))),
        ("Type", _text(data.get("EventType"))),
        ("Not before", full_time(not_before) if not_before else ""),
        ("Resources", vm_list(resources, 10)),
        ("Sent to", sent_to if action in ("approve", "acknowledge") else ""),
        ("Scope", scope_label(_text(data.get("Scope")))),
        ("Budgets", budgets),
        ("Reason", " ".join(p for p in (_text(data.get("ReasonCode")), _text(data.get("Reason"))) if p)),
        ("Actor", actor),
        ("Mode", "shadow: decided and published, nothing sent" if shadow else ""),
    ]
    facts = [(name, _cut(value, VALUE_CHARS)) for name, value in facts if value]
    return Notice(_cut(line, TITLE_CHARS), facts, "", footer, tone)


def _affected_names(affected: Any) -> list[str]:
    if not isinstance(affected, list):
        return []
    return [_text(vm.get("name")) for vm in affected if isinstance(vm, dict) and _text(vm.get("name"))]


def _last(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def group_label(group: str) -> str:
    """A group key as people say it: ``set/<sub>/<rg>/web`` and ``vmss/<sub>/<rg>/api`` -> ``web``,
    ``api``; ``tag/web`` -> ``web``."""
    return _last(group) if "/" in group else group


def scope_label(scope: str) -> str:
    """A scope key, short: ``group:set/<sub>/<rg>/web`` -> ``group web``, ``fault_domain:<group>/1`` ->
    ``FD 1 of group web``, ``zone:westeurope/2`` -> ``westeurope zone 2``, ``scale_set:<sub>/<rg>/api``
    -> ``scale set api``, ``fleet`` -> ``fleet``; unknown kinds as they are."""
    kind, sep, value = scope.partition(":")
    if not sep:
        return scope
    word = _SCOPE_WORDS.get(kind, kind)
    if kind == "group":
        return f"group {group_label(value)}"
    if kind in ("fault_domain", "update_domain") and "/" in value:
        group, _, number = value.rpartition("/")
        return f"{word} {number} of group {group_label(group)}"
    if kind == "zone" and "/" in value:
        location, _, zone = value.rpartition("/")
        return (f"{location} " if location and location != "-" else "") + f"zone {zone}"
    if kind in ("scale_set", "resource_group"):
        return f"{word} {_last(value)}"
    return f"{word} {value}".strip()


def budget_text(budgets: Any, action: str = "") -> str:
    """``group web, 1/1 used; zone 2, 1/2 used`` from the decision's ``Budgets``; a breach says how
    many of the event's own VMs go at once: ``zone 2: 4 at once, max 1``."""
    if not isinstance(budgets, list):
        return ""
    parts = []
    for item in budgets:
        if not isinstance(item, dict):
            continue
        low = {str(k).lower(): v for k, v in item.items()}
        label = scope_label(_text(low.get("scope"))) or "a scope"
        used, with_event, most = _text(low.get("used")), _text(low.get("withevent")), _text(low.get("max"))
        if action == "breach" and with_event:
            parts.append(f"{label}: {with_event} at once, max {most or '?'}")
            continue
        count = with_event if action == "approve" and with_event else used
        parts.append(f"{label}, {count or '?'}/{most or '?'} used")
    return "; ".join(parts)


# -- small pieces -----------------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    """RFC 3339 (``...Z``) or IMDS's RFC 1123 (``Mon, 19 Sep 2033 18:29:47 GMT``); None otherwise."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def when_text(moment: datetime, now: datetime) -> str:
    """``14:30 UTC`` today, ``Tue 19 Sep 14:30 UTC`` another day, with the year when it differs."""
    moment, now = moment.astimezone(UTC), now.astimezone(UTC)
    if moment.date() == now.date():
        return moment.strftime("%H:%M UTC")
    if moment.year == now.year:
        return moment.strftime("%a %d %b %H:%M UTC")
    return moment.strftime("%a %d %b %Y %H:%M UTC")


def full_time(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else ""


def relative(moment: datetime, now: datetime) -> str:
    """``in 15 min`` ahead, ``due 3 min ago`` once passed."""
    seconds = (moment - now).total_seconds()
    if seconds >= 0:
        return "in under a minute" if seconds < 60 else f"in {duration(seconds)}"
    return f"due {duration(-seconds)} ago" if -seconds >= 60 else "due now"


def duration(seconds: float) -> str:
    """``42 s``, ``4 min``, ``2 h 5 min``, ``3 days``: short, rounded to what a reader needs."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    return f"{round(hours / 24)} days"


def vm_list(resources: Any, limit: int) -> str:
    """``web-3, web-4 and 8 more`` from IMDS's Resources."""
    if not isinstance(resources, list):
        return ""
    names = [_text(r) for r in resources if _text(r)]
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"


def _text(value: Any) -> str:
    """A scalar as one line of text; containers and None as ''."""
    if value is None or isinstance(value, dict | list):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ".join(str(value).split())


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
