"""``[approvals]``: typed settings for the rules, the hooks and the approval queue.

``parse`` is called once, by ``config.py`` (the queue's table is parsed by ``queue/config.py``);
every bad key or value raises ConfigError naming it. The defaults are the field defaults of the
dataclasses (and nowhere else). The rules become ``policy.Rule`` values; secrets are not read here
(only the names of their variables and files): the queue's are read when the agent starts
(``queue/client.resolve``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError
from ..validation import as_bool, as_number, as_str, no_unknown
from .hook_process import DEFAULT_STOP_GRACE
from .hook_process import validate_settings as validate_hook_process
from .policy import ACTIONS, EVENT_TYPES, WHEN_KEYS, Rule, as_list
from .queue.config import QueueConfig, parse_queue

HOOK_TIMEOUT = 300.0  # seconds, for prepare and recover


@dataclass(frozen=True)
class HookSettings:
    """``[approvals.hooks]``: commands as argv, timeouts in seconds, and ``prepare_lead`` (run
    prepare when NotBefore is at most this many seconds away; None: at first sight)."""

    prepare: tuple[str, ...] | None = None
    recover: tuple[str, ...] | None = None
    prepare_timeout: float = HOOK_TIMEOUT
    recover_timeout: float = HOOK_TIMEOUT
    prepare_lead: float | None = None
    approve_after_prepare: bool = True
    env: tuple[str, ...] = ()  # variables passed to hooks besides hook_process.ALWAYS
    stop_grace: float = DEFAULT_STOP_GRACE  # seconds a running hook gets when the agent stops


@dataclass
class ApprovalsSettings:
    dry_run: bool = False
    leader_only: bool = False
    coordinator_only: bool = False  # no policy or hook approval: only the coordinator's messages
    rules: tuple[Rule, ...] | None = None  # None: the documented sample's policy
    hooks: HookSettings = field(default_factory=HookSettings)
    queue: QueueConfig | None = None


def parse(t: Mapping[str, Any]) -> ApprovalsSettings:
    """The ``[approvals]`` table, validated."""
    no_unknown(t, "approvals", ("dry_run", "leader_only", "coordinator_only", "rules", "hooks", "queue"))
    s = ApprovalsSettings()
    if "dry_run" in t:
        s.dry_run = as_bool(t["dry_run"], "approvals.dry_run")
    if "leader_only" in t:
        s.leader_only = as_bool(t["leader_only"], "approvals.leader_only")
    if "coordinator_only" in t:
        s.coordinator_only = as_bool(t["coordinator_only"], "approvals.coordinator_only")
    if "rules" in t:
        s.rules = parse_rules(t["rules"], "approvals.rules")
    if "hooks" in t:
        s.hooks = parse_hooks(_table(t["hooks"], "approvals.hooks"), "approvals.hooks")
    if "queue" in t:
        s.queue = parse_queue(_table(t["queue"], "approvals.queue"), "approvals.queue")
    if s.coordinator_only:
        # No sample rules, and a prepare hook only prepares: nothing here approves by itself.
        if isinstance(t.get("hooks"), Mapping) and t["hooks"].get("approve_after_prepare") is True:
            raise ConfigError("approvals.hooks.approve_after_prepare: contradicts coordinator_only = true "
                              "(only the coordinator approves; the prepare hook still runs)")
        s.rules = () if s.rules is None else s.rules
        s.hooks = replace(s.hooks, approve_after_prepare=False)
    check_consistency(s)
    return s


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a table")
    return value


def parse_rules(raw: Any, where: str) -> tuple[Rule, ...]:
    """``[[approvals.rules]]`` in order; ConfigError naming the key."""
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: must be an array of tables ([[approvals.rules]])")
    rules: list[Rule] = []
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
        rules.append(Rule(name, action, _parse_when(when, f"{at}.when")))
    return tuple(rules)


def _parse_when(when: dict[str, Any], where: str) -> dict[str, Any]:
    no_unknown(when, where, WHEN_KEYS)
    out: dict[str, Any] = {}
    for key, value in when.items():
        at = f"{where}.{key}"
        if key == "type":
            for v in as_list(value):
                if v not in EVENT_TYPES:
                    raise ConfigError(f"{at}: {v!r} is not one of {', '.join(EVENT_TYPES)}")
        elif key == "source":
            for v in as_list(value):
                if v not in ("Platform", "User"):
                    raise ConfigError(f"{at}: {v!r} is not Platform or User")
        elif key == "status":
            for v in as_list(value):
                if v not in ("Scheduled", "Started"):
                    raise ConfigError(f"{at}: {v!r} is not Scheduled or Started")
        elif key in ("min_duration", "max_duration", "min_notice", "max_notice"):
            value = as_number(value, at, -1, 10**9)
        elif key == "affects_this_vm":
            value = as_bool(value, at)
        elif key in ("resources", "description"):
            for v in as_list(value):
                as_str(v, at)
        out[key] = value
    return out


def parse_hooks(raw: Mapping[str, Any], where: str) -> HookSettings:
    """``[approvals.hooks]``."""
    no_unknown(
        raw, where,
        ("prepare", "prepare_timeout", "approve_after_prepare", "recover", "recover_timeout",
         "prepare_lead", "env", "stop_grace"),
    )
    process = validate_hook_process(raw, where)
    commands: dict[str, tuple[str, ...] | None] = {}
    for key in ("prepare", "recover"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, list) or not value
                                  or not all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{where}.{key}: must be a command as a list of strings")
        commands[key] = tuple(value) if value else None
    lead = raw.get("prepare_lead")
    return HookSettings(
        prepare=commands["prepare"],
        recover=commands["recover"],
        prepare_timeout=as_number(raw.get("prepare_timeout", HOOK_TIMEOUT), f"{where}.prepare_timeout",
                                  1, 86400),
        recover_timeout=as_number(raw.get("recover_timeout", HOOK_TIMEOUT), f"{where}.recover_timeout",
                                  1, 86400),
        prepare_lead=None if lead is None else as_number(lead, f"{where}.prepare_lead", 0, 30 * 86400),
        approve_after_prepare=as_bool(raw.get("approve_after_prepare", True),
                                      f"{where}.approve_after_prepare"),
        env=tuple(process.get("env", ())),
        stop_grace=process.get("stop_grace", DEFAULT_STOP_GRACE),
    )


def check_consistency(settings: ApprovalsSettings) -> None:
    """Cross-checks between rules, hooks and ``coordinator_only``."""
    if settings.coordinator_only:
        if settings.rules is None or settings.hooks.approve_after_prepare:
            raise ConfigError("approvals.coordinator_only: give rules (none approving) and "
                              "hooks.approve_after_prepare = false with it, as parse() does")
        if settings.queue is None:
            raise ConfigError("approvals.coordinator_only: needs [approvals.queue], where the "
                              "coordinator's signed approvals arrive (without it nothing is ever "
                              "approved early: use rules = [] for that)")
        for i, rule in enumerate(settings.rules or ()):
            if rule.action in ("approve", "prepare-then-approve"):
                raise ConfigError(
                    f"approvals.rules[{i}].action: {rule.action} contradicts coordinator_only = true "
                    "(only the coordinator approves; rules may only wait or ignore)"
                )
    if settings.rules and not settings.hooks.prepare:
        for i, rule in enumerate(settings.rules):
            if rule.action == "prepare-then-approve":
                raise ConfigError(
                    f"approvals.rules[{i}].action: prepare-then-approve needs a prepare command "
                    "(approvals.hooks.prepare)"
                )
