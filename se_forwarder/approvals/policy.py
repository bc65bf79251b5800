"""Policy rules: which Scheduled events this agent approves by itself.

``[[approvals.rules]]`` are tried in order and the first match wins; no match means wait (for
NotBefore, or for a remote approval). Without rules, the documented sample's policy applies:
approve user-initiated events, and Freezes with 0 <= DurationInSeconds < 9.

A rule's ``when`` table (every key optional, all given keys must hold; a list means any of):
``type`` (EventType), ``source`` (EventSource; missing on old api-versions = Platform),
``status`` (EventStatus), ``min_duration`` / ``max_duration`` (DurationInSeconds; ``max_duration``
never matches an unknown duration of -1), ``min_notice`` / ``max_notice`` (seconds from now until
NotBefore; never match without a NotBefore), ``affects_this_vm`` (this VM's name is in Resources),
``resources`` (fnmatch patterns; any entry of Resources matching any pattern), ``description``
(shell patterns, case-insensitive, against Description: ``"*Live Migration*"`` tells a
memory-preserving live migration from "Host server is undergoing maintenance"; an event without a
Description, from an old api-version, is matched as ""). Actions: ``approve``,
``prepare-then-approve``, ``wait``, ``ignore`` (no approval and no hooks). Only a Scheduled event can
be approved: an approving rule that matches a Started event means wait.

Fields IMDS served that the agent could not read (``event_fields.py``) never make a rule approve
what it would not approve otherwise: an unknown type or source matches no ``type`` or ``source``
condition, an unknown DurationInSeconds is -1, an unknown NotBefore matches no notice condition
(it might be seconds away), unknown Resources match no ``resources`` or ``affects_this_vm``
condition, and an unknown EventStatus counts as Started (never approved).

The rules are validated by ``settings.py`` (once, when the configuration is read).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..event_fields import KNOWN_TYPES
from ..model import SCHEDULED, ScheduledEvent

ACTIONS = ("approve", "prepare-then-approve", "wait", "ignore")
EVENT_TYPES = KNOWN_TYPES  # the types a rule may name
WHEN_KEYS = (
    "type", "source", "status", "min_duration", "max_duration", "min_notice", "max_notice",
    "affects_this_vm", "resources", "description",
)


@dataclass(frozen=True)
class Rule:
    name: str
    action: str
    when: Mapping[str, Any] = field(default_factory=dict)

    def matches(self, event: ScheduledEvent, vm_name: str | None, now: datetime) -> bool:
        w = self.when
        if "type" in w and event.event_type not in as_list(w["type"]):
            return False
        if "source" in w and (event.source or "Platform") not in as_list(w["source"]):
            return False
        if "status" in w and event.status not in as_list(w["status"]):
            return False
        duration = event.duration if event.duration is not None else -1
        if "min_duration" in w and duration < w["min_duration"]:
            return False
        if "max_duration" in w and (duration < 0 or duration > w["max_duration"]):
            return False
        if "min_notice" in w or "max_notice" in w:
            if event.not_before is None:
                return False
            notice = (event.not_before - now).total_seconds()
            if "min_notice" in w and notice < w["min_notice"]:
                return False
            if "max_notice" in w and notice > w["max_notice"]:
                return False
        if ("affects_this_vm" in w or "resources" in w) and event.unreadable("Resources"):
            return False
        if "affects_this_vm" in w and event.affects(vm_name) != w["affects_this_vm"]:
            return False
        if "resources" in w:
            patterns = as_list(w["resources"])
            if not any(fnmatch.fnmatchcase(r, p) for r in event.resources for p in patterns):
                return False
        if "description" in w:
            text = (event.description or "").casefold()
            if not any(fnmatch.fnmatchcase(text, p.casefold()) for p in as_list(w["description"])):
                return False
        return True


SAMPLE_RULES: tuple[Rule, ...] = (
    Rule("sample-user", "approve", {"source": "User", "status": "Scheduled"}),
    Rule(
        "sample-freeze",
        "approve",
        {"type": "Freeze", "status": "Scheduled", "min_duration": 0, "max_duration": 8},
    ),
)


@dataclass(frozen=True)
class Decision:
    action: str  # approve | prepare-then-approve | wait | ignore
    rule: str | None


class Policy:
    """The rules in order; ``decide`` says what to do with one event."""

    def __init__(self, rules: Sequence[Rule] | None = None) -> None:
        self.rules: tuple[Rule, ...] = SAMPLE_RULES if rules is None else tuple(rules)
        # Whether a decision can change with time alone (notice: seconds until NotBefore).
        self.timed = any("min_notice" in r.when or "max_notice" in r.when for r in self.rules)

    def decide(
        self, event: ScheduledEvent, vm_name: str | None, now: datetime | None = None
    ) -> Decision:
        """The first matching rule's action; only a Scheduled event can be approved."""
        now = now or datetime.now(UTC)
        for rule in self.rules:
            if rule.matches(event, vm_name, now):
                action = rule.action
                if action in ("approve", "prepare-then-approve") and event.status != SCHEDULED:
                    return Decision("wait", rule.name)
                return Decision(action, rule.name)
        return Decision("wait", None)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
