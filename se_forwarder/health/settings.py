"""``[health]``: the probes this agent runs against its own VM's application, parsed once.

``parse`` is called by ``config.py``; every bad key or value raises ConfigError naming it, in one
line. The defaults are the dataclasses' field defaults. Pure: nothing is reached or run here.

Probe types (``type``):

- ``http``: ``url`` (http or https; https is verified, against ``ca_file`` when given) answers a
  status in ``expect_status`` (a number or a list; default any status from 200 to 399, as a
  Kubernetes HTTP probe);
- ``tcp``: ``address`` (``host:port``, ``[v6]:port``) accepts a connection;
- ``command``: ``command`` (a list of strings) exits 0, with the hooks' environment allow-list
  (``PATH``, ``LANG``, ``LC_*``, ``TZ``, ``SE_*`` and the names in ``env``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..approvals.hook_process import validate_settings as validate_process
from ..errors import ConfigError
from ..validation import as_int, as_number, as_str, check_ca_file, no_unknown, public_url, split_http_url

PROBE_TYPES = ("http", "tcp", "command")
DEFAULT_STATUSES = tuple(range(200, 400))
MAX_PROBES = 16
_COMMON = ("type", "name", "timeout")
_KEYS = {
    "http": (*_COMMON, "url", "expect_status", "ca_file"),
    "tcp": (*_COMMON, "address"),
    "command": (*_COMMON, "command"),
}
_HOST = re.compile(r"[A-Za-z0-9._-]+\Z")


@dataclass(frozen=True)
class ProbeSettings:
    """One ``[[health.probes]]`` entry: its ``type``, a unique ``name`` and what it checks."""

    type: str
    name: str
    timeout: float
    url: str = ""
    expect_status: tuple[int, ...] = DEFAULT_STATUSES
    ca_file: str | None = None
    host: str = ""
    port: int = 0
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class HealthSettings:
    """``[health]``: the probes, how often they run, and how many results in a row flip the
    verdict (``healthy_threshold`` passes, ``unhealthy_threshold`` failures)."""

    probes: tuple[ProbeSettings, ...]
    interval: float = 10.0
    timeout: float = 5.0
    healthy_threshold: int = 1
    unhealthy_threshold: int = 3
    env: tuple[str, ...] = ()


def parse(t: Mapping[str, Any], where: str = "health") -> HealthSettings:
    """The ``[health]`` table, validated (module docstring)."""
    no_unknown(t, where, ("interval", "timeout", "healthy_threshold", "unhealthy_threshold", "env",
                          "probes"))
    interval = as_number(t.get("interval", HealthSettings.interval), f"{where}.interval", 1, 3600)
    timeout = _timeout(t.get("timeout", min(HealthSettings.timeout, interval / 2)), f"{where}.timeout",
                       interval)
    env = tuple(validate_process({"env": t["env"]}, where)["env"]) if "env" in t else ()
    raw = t.get("probes")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}.probes: give at least one probe, e.g. [[{where}.probes]] "
                          'type = "http" url = "http://127.0.0.1:8080/healthz"')
    if len(raw) > MAX_PROBES:
        raise ConfigError(f"{where}.probes: {len(raw)} probes; at most {MAX_PROBES}")
    probes: list[ProbeSettings] = []
    for i, item in enumerate(raw):
        probe = _probe(item, f"{where}.probes[{i}]", timeout, interval)
        if any(p.name == probe.name for p in probes):
            raise ConfigError(f"{where}.probes[{i}].name: {probe.name!r} names another probe too; "
                              "give each probe its own name")
        probes.append(probe)
    return HealthSettings(
        probes=tuple(probes), interval=interval, timeout=timeout, env=env,
        healthy_threshold=as_int(t.get("healthy_threshold", HealthSettings.healthy_threshold),
                                 f"{where}.healthy_threshold", 1, 100),
        unhealthy_threshold=as_int(t.get("unhealthy_threshold", HealthSettings.unhealthy_threshold),
                                   f"{where}.unhealthy_threshold", 1, 100),
    )


def _timeout(value: Any, where: str, interval: float) -> float:
    seconds = as_number(value, where, 0.1, 3600)
    if seconds >= interval:
        raise ConfigError(f"{where}: {seconds:g} s is not shorter than the interval ({interval:g} s); "
                          "a probe must end before the next round starts")
    return seconds


def _probe(item: Any, where: str, timeout: float, interval: float) -> ProbeSettings:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a table")
    kind = item.get("type")
    if kind not in PROBE_TYPES:
        raise ConfigError(f"{where}.type: {kind!r} is not a probe type ({', '.join(PROBE_TYPES)})")
    no_unknown(item, where, _KEYS[kind])
    own = _timeout(item["timeout"], f"{where}.timeout", interval) if "timeout" in item else timeout
    if kind == "http":
        url = as_str(item.get("url", ""), f"{where}.url")
        if not url:
            raise ConfigError(f'{where}.url: an http probe needs a url, e.g. "http://127.0.0.1:8080/healthz"')
        scheme = urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise ConfigError(f"{where}.url: must be an http:// or https:// URL"
                              + (f", not {scheme}://" if scheme else ""))
        if not urlsplit(url).hostname:
            raise ConfigError(f"{where}.url: the URL names no host, e.g. http://127.0.0.1:8080/healthz")
        parts = split_http_url(url, f"{where}.url")
        ca_file = as_str(item["ca_file"], f"{where}.ca_file") if "ca_file" in item else None
        if ca_file is not None:
            if parts.scheme != "https":
                raise ConfigError(f"{where}.ca_file: only applies to an https url")
            check_ca_file(ca_file, f"{where}.ca_file")
        name = item.get("name", f"http {public_url(url)}")
        return ProbeSettings("http", _name(name, where), own, url=url, ca_file=ca_file,
                             expect_status=_statuses(item.get("expect_status"), f"{where}.expect_status"))
    if kind == "tcp":
        host, port = _address(item.get("address"), f"{where}.address")
        shown = f"[{host}]" if ":" in host else host
        return ProbeSettings("tcp", _name(item.get("name", f"tcp {shown}:{port}"), where), own,
                             host=host, port=port)
    command = item.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command):
        raise ConfigError(f'{where}.command: a command probe needs a command as a list of strings, '
                          'e.g. ["/usr/local/bin/check-app", "--quick"]')
    default = f"command {command[0].rsplit('/', 1)[-1]}"
    return ProbeSettings("command", _name(item.get("name", default), where), own, command=tuple(command))


def _name(value: Any, where: str) -> str:
    name = as_str(value, f"{where}.name").strip()
    if not name or len(name) > 100 or not name.isprintable():
        raise ConfigError(f"{where}.name: {value!r} is not a name (printable, 1 to 100 characters)")
    return name


def _statuses(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return DEFAULT_STATUSES
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ConfigError(f"{where}: give at least one status, e.g. 200 or [200, 204]")
    return tuple(as_int(v, where, 100, 599) for v in items)


def _address(value: Any, where: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); one line naming what is wrong."""
    text = as_str(value if value is not None else "", where).strip()
    example = 'e.g. "127.0.0.1:5432" or "[::1]:5432"'
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        ok = bool(sep and host and ":" in host)
    else:
        host, sep, port_text = text.rpartition(":")
        ok = bool(sep and host and ":" not in host and _HOST.match(host))
    if not ok or not port_text.isdigit():
        raise ConfigError(f"{where}: {text!r} is not host:port ({example})")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ConfigError(f"{where}: port {port} is out of range (1..65535)")
    return host, port
