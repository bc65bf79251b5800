"""``[[gates]]`` of ``coordinator.toml``: what closes early approval in a scope while something is
wrong. Validated once, one line per problem::

    [[gates]]
    name = "web-alerts"                  # shown in every deferral it causes, `status` and the page
    type = "alertmanager"                # Prometheus Alertmanager, API v2
    scope = "group:web"                  # a scope key as `pause` takes it (default "fleet")
    url = "http://alertmanager.monitoring:9093"
    matchers = ['severity=~"critical|page"', 'service="web"']   # label matchers (all must match)
    # token_env = "AM_TOKEN"             # a bearer token from a variable or token_file (https, or
                                         # plain http to loopback only)

    [[gates]]
    name = "azure-alerts"
    type = "azure-monitor"               # fired Azure Monitor alerts through Resource Graph ([azure]'s
    scope = "fleet"                      # subscriptions and credential)
    severities = ["Sev0", "Sev1"]        # optional: only these severities
    rules = []                           # optional: only these alert rules (names)
    target = ""                          # optional: only alerts on resources under this ARM id

    [[gates]]
    name = "deploys"
    type = "http"                        # any URL: 2xx is open, anything else closed
    url = "https://deploy.internal/api/can-maintain"

Every gate also takes ``interval`` (how often it is asked, 1s..1h, default 30s), ``timeout`` (one
answer, 1s..60s, default 10s), ``unreachable`` (``closed``, the default, or ``open``: what a gate
that cannot be asked counts as) and ``ca_file`` (a PEM bundle to trust for https; TLS is always
verified). What the gates do: input/gates.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ....errors import ConfigError
from ....fleet.health_queries import SEVERITIES
from ....validation import as_choice, as_http_url, as_str, as_tables, check_ca_file, is_loopback, no_unknown
from .durations import parse_duration
from .hub import path
from .windows import scope_key

TYPES = ("alertmanager", "azure-monitor", "http")
UNREACHABLE = ("closed", "open")
COMMON = ("name", "type", "scope", "interval", "timeout", "unreachable")
KEYS = {"alertmanager": (*COMMON, "url", "matchers", "token_env", "token_file", "ca_file"),
        "http": (*COMMON, "url", "token_env", "token_file", "ca_file"),
        "azure-monitor": (*COMMON, "severities", "rules", "target")}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_MATCHER = re.compile(r'^\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|[^\s"{},]*)\s*\Z')
_ARM_ID = re.compile(r"^/subscriptions/[0-9a-fA-F-]{36}(/[^/\s]+)*\Z")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class GateSettings:
    name: str
    type: str
    scope: str = "fleet"
    url: str = ""
    matchers: tuple[str, ...] = ()
    severities: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    target: str = ""
    interval: float = 30.0
    timeout: float = 10.0
    closed_when_unreachable: bool = True
    token_env: str = ""
    token_file: str = ""
    ca_file: str = ""

    @property
    def where(self) -> str:
        return f"gates {self.name!r}"


def load_gates(items: Any, azure: bool) -> tuple[GateSettings, ...]:
    """``[[gates]]`` (module docstring); ``azure``: whether ``[azure]`` is configured (an
    ``azure-monitor`` gate needs it)."""
    if items is None:
        return ()
    out: list[GateSettings] = []
    for _, where, item in as_tables(items, "gates"):
        gate = _gate(item, where, azure)
        if any(g.name == gate.name for g in out):
            raise ConfigError(f"{where}.name: {gate.name!r} is another gate's name too")
        out.append(gate)
    return tuple(out)


def _gate(item: dict[str, Any], where: str, azure: bool) -> GateSettings:
    kind = item.get("type")
    if kind not in TYPES:
        raise ConfigError(f"{where}.type: {kind!r} is not a gate type ({', '.join(TYPES)})")
    no_unknown(item, where, KEYS[kind])
    if "name" not in item:
        raise ConfigError(f"{where}.name: missing (a short name shown in deferrals)")
    name = as_str(item["name"], f"{where}.name").strip()
    if not _NAME.match(name):
        raise ConfigError(f"{where}.name: {name!r} must be 1-63 letters, digits, '.', '_' or '-'")
    values: dict[str, Any] = {
        "name": name, "type": kind, "scope": scope_key(item.get("scope", "fleet"), f"{where}.scope"),
        "closed_when_unreachable": as_choice(item.get("unreachable", "closed"), f"{where}.unreachable",
                                             UNREACHABLE) == "closed"}
    if "interval" in item:
        values["interval"] = parse_duration(item["interval"], f"{where}.interval", 1.0, 3600.0)
    if "timeout" in item:
        values["timeout"] = parse_duration(item["timeout"], f"{where}.timeout", 1.0, 60.0)
    if kind == "azure-monitor":
        if not azure:
            raise ConfigError(f"{where}: an azure-monitor gate reads Resource Graph with [azure]'s "
                              "credential; add [azure] with its subscriptions")
        values["severities"] = _strings(item.get("severities", []), f"{where}.severities", SEVERITIES)
        values["rules"] = _strings(item.get("rules", []), f"{where}.rules")
        target = as_str(item.get("target", ""), f"{where}.target").strip().rstrip("/")
        if target and not _ARM_ID.match(target):
            raise ConfigError(f"{where}.target: {target!r} is not an ARM id (/subscriptions/<id>/...)")
        values["target"] = target
        return GateSettings(**values)
    if "url" not in item:
        raise ConfigError(f"{where}.url: missing (the {'Alertmanager' if kind == 'alertmanager' else 'gate'}"
                          "'s http(s) URL)")
    values["url"] = url = as_http_url(item["url"], f"{where}.url")
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise ConfigError(f"{where}.url: no credentials in the URL; give a bearer token with token_env or "
                          "token_file")
    if kind == "alertmanager":
        values["matchers"] = _matchers(item.get("matchers", []), f"{where}.matchers")
    for key in ("token_env", "token_file"):
        if key in item:
            values[key] = _secret_source(item[key], f"{where}.{key}", key)
    if values.get("token_env") and values.get("token_file"):
        raise ConfigError(f"{where}: give token_env or token_file, not both")
    if (values.get("token_env") or values.get("token_file")) and parts.scheme == "http" \
            and not is_loopback(parts.hostname or ""):
        raise ConfigError(f"{where}.url: a token goes over https only (or plain http to a loopback address)")
    if "ca_file" in item:
        values["ca_file"] = ca = path(item["ca_file"], f"{where}.ca_file")
        check_ca_file(ca, f"{where}.ca_file")
    return GateSettings(**values)


def _strings(value: Any, where: str, allowed: tuple[str, ...] = ()) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{where}: must be a list of strings")
    for item in value:
        if allowed and item not in allowed:
            raise ConfigError(f"{where}: {item!r} is not one of {', '.join(allowed)}")
    return tuple(v.strip() for v in value)


def _matchers(value: Any, where: str) -> tuple[str, ...]:
    """Alertmanager label matchers (``name="value"``, ``!=``, ``=~``, ``!~``), as its ``filter``
    parameter takes them."""
    items = _strings(value, where)
    for i, item in enumerate(items):
        if not _MATCHER.match(item):
            raise ConfigError(f"{where}[{i}]: {item!r} is not a label matcher (e.g. alertname=\"HighCpu\", "
                              "severity=~\"critical|page\")")
    return items


def _secret_source(value: Any, where: str, key: str) -> str:
    text = as_str(value, where).strip()
    if key == "token_env" and not _ENV.match(text):
        raise ConfigError(f"{where}: {text!r} is not an environment variable's name")
    return text if key == "token_env" else path(text, where)
