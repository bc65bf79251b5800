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
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..errors import ConfigError
from ..model import SCHEDULED, ScheduledEvent
from ..validation import as_bool, as_number, as_str, no_unknown
from .queue.names import validate_account_url, validate_template

ACTIONS = ("approve", "prepare-then-approve", "wait", "ignore")
EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
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
        if "type" in w and event.event_type not in _as_list(w["type"]):
            return False
        if "source" in w and (event.source or "Platform") not in _as_list(w["source"]):
            return False
        if "status" in w and event.status not in _as_list(w["status"]):
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
        if "affects_this_vm" in w and event.affects(vm_name) != w["affects_this_vm"]:
            return False
        if "resources" in w:
            patterns = _as_list(w["resources"])
            if not any(fnmatch.fnmatchcase(r, p) for r in event.resources for p in patterns):
                return False
        if "description" in w:
            text = (event.description or "").casefold()
            if not any(fnmatch.fnmatchcase(text, p.casefold()) for p in _as_list(w["description"])):
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

    def __init__(self, rules: list[dict[str, Any]] | None = None) -> None:
        self.rules: tuple[Rule, ...] = (
            SAMPLE_RULES if rules is None else tuple(Rule(r["name"], r["action"], r["when"]) for r in rules)
        )

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


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# -- validation (called by config.py) ---------------------------------------------------------


def validate_rules(raw: Any, where: str) -> list[dict[str, Any]]:
    """``[[approvals.rules]]`` as plain dicts {name, action, when}; ConfigError naming the key."""
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: must be an array of tables ([[approvals.rules]])")
    rules: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{at}: must be a table")
        no_unknown(item, at, ("name", "when", "action"))
        action = item.get("action")
        if action not in ACTIONS:
            raise ConfigError(f"{at}.action: {action!r} is not one of {', '.join(ACTIONS)}")
        when = item.get("when", {})
        if not isinstance(when, dict):
            raise ConfigError(f"{at}.when: must be a table")
        name = as_str(item.get("name", f"rule{i + 1}"), f"{at}.name")
        if not name.strip() or name in names:
            raise ConfigError(f"{at}.name: {name!r} is empty or used by another rule "
                              "(it appears in ApprovedBy as policy:<name>)")
        names.add(name)
        rules.append({"name": name, "action": action, "when": _validate_when(when, f"{at}.when")})
    return rules


def _validate_when(when: dict[str, Any], where: str) -> dict[str, Any]:
    no_unknown(when, where, WHEN_KEYS)
    out: dict[str, Any] = {}
    for key, value in when.items():
        at = f"{where}.{key}"
        if key == "type":
            for v in _as_list(value):
                if v not in EVENT_TYPES:
                    raise ConfigError(f"{at}: {v!r} is not one of {', '.join(EVENT_TYPES)}")
        elif key == "source":
            for v in _as_list(value):
                if v not in ("Platform", "User"):
                    raise ConfigError(f"{at}: {v!r} is not Platform or User")
        elif key == "status":
            for v in _as_list(value):
                if v not in ("Scheduled", "Started"):
                    raise ConfigError(f"{at}: {v!r} is not Scheduled or Started")
        elif key in ("min_duration", "max_duration", "min_notice", "max_notice"):
            value = as_number(value, at, -1, 10**9)
        elif key == "affects_this_vm":
            value = as_bool(value, at)
        elif key in ("resources", "description"):
            for v in _as_list(value):
                as_str(v, at)
        out[key] = value
    return out


def validate_hooks(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """``[approvals.hooks]``: commands as argv lists, timeouts in seconds (default 300), and
    ``prepare_lead`` (run prepare when NotBefore is at most this many seconds away; unset: at
    first sight)."""
    no_unknown(
        raw, where,
        ("prepare", "prepare_timeout", "approve_after_prepare", "recover", "recover_timeout",
         "prepare_lead"),
    )
    out: dict[str, Any] = {}
    for key in ("prepare", "recover"):
        if key in raw:
            value = raw[key]
            if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}.{key}: must be a command as a list of strings")
            out[key] = value
    for key in ("prepare_timeout", "recover_timeout"):
        out[key] = as_number(raw.get(key, 300), f"{where}.{key}", 1, 86400)
    if "prepare_lead" in raw:
        out["prepare_lead"] = as_number(raw["prepare_lead"], f"{where}.prepare_lead", 0, 30 * 86400)
    out["approve_after_prepare"] = as_bool(
        raw.get("approve_after_prepare", True), f"{where}.approve_after_prepare"
    )
    return out


DEFAULT_VISIBILITY_TIMEOUT = 30  # seconds a received approval message stays invisible
DEFAULT_POLL_INTERVAL = 1.0  # seconds between receives from an empty queue
QUEUE_KEYS = (
    "type", "account_url", "queue", "connection_string_env", "connection_string_file",
    "client_id", "verify_keys_env", "verify_keys_file", "visibility_timeout", "poll_interval",
)
# The shared HMAC key of earlier versions: refused, so no VM holds a key that can sign approvals.
REMOVED_QUEUE_KEYS = ("signing_key_env", "signing_key_file")


def validate_queue(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """``[approvals.queue]``: names, not secrets (those are read when the agent starts)."""
    for key in REMOVED_QUEUE_KEYS:
        if key in raw:
            raise ConfigError(
                f"{where}.{key}: agents no longer hold a signing key (it would let this VM sign "
                "approvals for every VM); configure verify_keys_env or verify_keys_file with the "
                "coordinator's public key (the .pub file of 'se-forwarder fleet keygen')")
    no_unknown(raw, where, QUEUE_KEYS)
    out = dict(raw)
    if out.get("type", "storage-queue") != "storage-queue":
        raise ConfigError(f"{where}.type: only 'storage-queue' is supported")
    out["type"] = "storage-queue"
    for key in QUEUE_KEYS[1:8]:
        if key in out:
            as_str(out[key], f"{where}.{key}")
    if "queue" not in out:
        raise ConfigError(f"{where}.queue: missing (e.g. 'se-approvals-{{vm_name}}')")
    validate_template(out["queue"], f"{where}.queue")
    if "account_url" in out:
        out["account_url"] = validate_account_url(out["account_url"], f"{where}.account_url")
    if "account_url" not in out and "connection_string_env" not in out and (
        "connection_string_file" not in out
    ):
        raise ConfigError(f"{where}.account_url: missing (or give connection_string_env)")
    if "verify_keys_env" not in out and "verify_keys_file" not in out:
        raise ConfigError(f"{where}.verify_keys_env: missing (the coordinator's public key(s): "
                          "approval messages must be signed)")
    out["visibility_timeout"] = as_number(
        out.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT), f"{where}.visibility_timeout", 5, 3600
    )
    out["poll_interval"] = as_number(
        out.get("poll_interval", DEFAULT_POLL_INTERVAL), f"{where}.poll_interval", 0.05, 60
    )
    return out


def check_consistency(settings: Any) -> None:
    """Cross-checks between rules and hooks (``settings`` is config.ApprovalsSettings)."""
    if settings.rules and not settings.hooks.get("prepare"):
        for i, rule in enumerate(settings.rules):
            if rule["action"] == "prepare-then-approve":
                raise ConfigError(
                    f"approvals.rules[{i}].action: prepare-then-approve needs a prepare command "
                    "(approvals.hooks.prepare)"
                )
