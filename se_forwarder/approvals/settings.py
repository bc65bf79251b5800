"""``[approvals]``: typed settings for the rules, the hooks and the approval queue.

``parse`` is called once, by ``config.py``; every bad key or value raises ConfigError naming it.
The defaults are the field defaults below (and nowhere else). The rules become ``policy.Rule``
values; secrets are not read here (only the names of their variables and files): the queue's are
read when the agent starts (``queue/client.resolve``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError
from ..validation import as_bool, as_number, as_str, no_unknown
from .policy import ACTIONS, EVENT_TYPES, WHEN_KEYS, Rule, as_list
from .queue.names import validate_account_url, validate_template

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


@dataclass(frozen=True, kw_only=True)
class QueueConfig(Mapping[str, Any]):
    """``[approvals.queue]`` as configured: names, not secrets. It also reads like its table
    (``queue["queue"]``); a key not given (None) is absent, as it was from the table."""

    queue: str
    type: str = "storage-queue"
    account_url: str | None = None
    connection_string_env: str | None = None
    connection_string_file: str | None = None
    client_id: str | None = None
    signing_key_env: str | None = None
    signing_key_file: str | None = None
    visibility_timeout: int = 30  # seconds a received message stays invisible
    poll_interval: float = 1.0  # seconds between receives from an empty queue

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key) if key in _QUEUE_FIELDS else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (key for key in _QUEUE_FIELDS if getattr(self, key) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


_QUEUE_FIELDS = tuple(f.name for f in fields(QueueConfig))
QUEUE_KEYS = ("type", "account_url", "queue", "connection_string_env", "connection_string_file",
              "client_id", "signing_key_env", "signing_key_file", "visibility_timeout", "poll_interval")


@dataclass
class ApprovalsSettings:
    dry_run: bool = False
    leader_only: bool = False
    rules: tuple[Rule, ...] | None = None  # None: the documented sample's policy
    hooks: HookSettings = field(default_factory=HookSettings)
    queue: QueueConfig | None = None


def parse(t: Mapping[str, Any]) -> ApprovalsSettings:
    """The ``[approvals]`` table, validated."""
    no_unknown(t, "approvals", ("dry_run", "leader_only", "rules", "hooks", "queue"))
    s = ApprovalsSettings()
    if "dry_run" in t:
        s.dry_run = as_bool(t["dry_run"], "approvals.dry_run")
    if "leader_only" in t:
        s.leader_only = as_bool(t["leader_only"], "approvals.leader_only")
    if "rules" in t:
        s.rules = parse_rules(t["rules"], "approvals.rules")
    if "hooks" in t:
        s.hooks = parse_hooks(_table(t["hooks"], "approvals.hooks"), "approvals.hooks")
    if "queue" in t:
        s.queue = parse_queue(_table(t["queue"], "approvals.queue"), "approvals.queue")
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
         "prepare_lead"),
    )
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
    )


def parse_queue(raw: Mapping[str, Any], where: str) -> QueueConfig:
    """``[approvals.queue]``: names, not secrets (those are read when the agent starts)."""
    no_unknown(raw, where, QUEUE_KEYS)
    if raw.get("type", "storage-queue") != "storage-queue":
        raise ConfigError(f"{where}.type: only 'storage-queue' is supported")
    names = {key: as_str(raw[key], f"{where}.{key}") for key in QUEUE_KEYS[1:8] if key in raw}
    if "queue" not in names:
        raise ConfigError(f"{where}.queue: missing (e.g. 'se-approvals-{{vm_name}}')")
    validate_template(names["queue"], f"{where}.queue")
    if "account_url" in names:
        names["account_url"] = validate_account_url(names["account_url"], f"{where}.account_url")
    if not {"account_url", "connection_string_env", "connection_string_file"} & names.keys():
        raise ConfigError(f"{where}.account_url: missing (or give connection_string_env)")
    if not {"signing_key_env", "signing_key_file"} & names.keys():
        raise ConfigError(f"{where}.signing_key_env: missing (approval messages must be signed)")
    defaults = QueueConfig(queue=names["queue"])
    return QueueConfig(
        **names,
        visibility_timeout=int(as_number(raw.get("visibility_timeout", defaults.visibility_timeout),
                                         f"{where}.visibility_timeout", 5, 3600)),
        poll_interval=float(as_number(raw.get("poll_interval", defaults.poll_interval),
                                      f"{where}.poll_interval", 0.05, 60)),
    )


def check_consistency(settings: ApprovalsSettings) -> None:
    """Cross-checks between rules and hooks."""
    if settings.rules and not settings.hooks.prepare:
        for i, rule in enumerate(settings.rules):
            if rule.action == "prepare-then-approve":
                raise ConfigError(
                    f"approvals.rules[{i}].action: prepare-then-approve needs a prepare command "
                    "(approvals.hooks.prepare)"
                )
