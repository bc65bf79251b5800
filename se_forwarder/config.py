"""TOML file + environment + flags -> one validated, typed Settings object.

Precedence: flags over ``SE_FORWARDER_<SECTION>_<KEY>`` environment variables over the file over
defaults. Every unknown key and every bad value raises ConfigError naming the exact key.
"""

from __future__ import annotations

import datetime
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .approvals import settings as approvals_settings
from .approvals.settings import ApprovalsSettings
from .errors import ConfigError
from .health import settings as health_settings
from .health.settings import HealthSettings
from .imds import DEFAULT_API_VERSION, DEFAULT_URL
from .validation import (
    as_choice,
    as_http_url,
    as_int,
    as_number,
    as_str,
    as_table,
    is_loopback,
    no_unknown,
)

if TYPE_CHECKING:
    from .sinks.base import SinkOptions

ENV_PREFIX = "SE_FORWARDER_"
KNOWN_API_VERSIONS = (
    "2017-03-01", "2017-08-01", "2017-11-01", "2019-01-01", "2019-04-01", "2019-08-01", "2020-07-01",
)
DEFAULT_STATE_DIR = "/var/lib/se-forwarder"


@dataclass
class ImdsSettings:
    url: str = DEFAULT_URL  # or "discover": DHCP option 245 in the lease files (discovery.py)
    api_version: str = DEFAULT_API_VERSION
    poll_interval: float = 1.0
    timeout: float = 5.0
    first_call_timeout: float = 130.0
    lease_files: list[str] | None = None  # globs for url = "discover"; None: the usual places
    # Accepted from older configurations and ignored: IMDS is retried at the poll interval (a 429
    # after Retry-After or about a second), never backed off for long. The agent warns once.
    max_backoff: float | None = None


@dataclass
class VmSettings:
    tags: list[str] = field(default_factory=list)  # tag names copied into data.Vm.tags


@dataclass
class StateSettings:
    dir: Path = Path(DEFAULT_STATE_DIR)
    # Delivered events, dead letters and finished hook runs are kept this long (seconds), then
    # pruned while the agent runs (hourly) and their space reclaimed.
    retention: float = 30 * 86400.0


@dataclass
class SinkSettings:
    type: str
    name: str
    options: SinkOptions
    heartbeat_interval: float = 0.0  # seconds between heartbeat CloudEvents; 0 = none


@dataclass
class TelemetrySettings:
    log_format: str = "auto"  # auto (json under systemd / when not a terminal) | json | text
    log_level: str = "info"
    otlp_endpoint: str = ""
    prometheus_port: int = 0
    prometheus_host: str = "127.0.0.1"
    unhealthy_after: float = 60.0  # /healthz turns 503 when no poll succeeded for this long


@dataclass
class Settings:
    imds: ImdsSettings = field(default_factory=ImdsSettings)
    state: StateSettings = field(default_factory=StateSettings)
    sinks: list[SinkSettings] = field(default_factory=list)
    approvals: ApprovalsSettings = field(default_factory=ApprovalsSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    vm: VmSettings = field(default_factory=VmSettings)
    health: HealthSettings | None = None  # [health]: the application's probes (None: none)
    source: str = "defaults"  # where the settings came from, for messages


_SECTIONS = ("imds", "state", "sinks", "approvals", "telemetry", "vm", "health")


def load(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    sink_specs: list[str] | None = None,
) -> Settings:
    """Build the settings; ``overrides`` are flags as {section: {key: value}} (None values ignored)."""
    raw: dict[str, Any] = _read_file(Path(path)) if path else {}
    env = os.environ if env is None else env
    _merge(raw, _from_env(env))
    for section, values in (overrides or {}).items():
        for key, value in values.items():
            if value is not None:
                raw.setdefault(section, {})[key] = value
    if sink_specs:
        raw["sinks"] = [parse_sink_spec(s, f"--sink {s!r}") for s in sink_specs]
    settings = from_dict(raw)
    settings.source = str(path) if path else "defaults"
    return settings


def from_dict(raw: Mapping[str, Any]) -> Settings:
    for key in raw:
        if key not in _SECTIONS:
            raise ConfigError(f"unknown section or key {key!r} (known: {', '.join(_SECTIONS)})")
    settings = Settings(
        imds=_imds(as_table(raw, "imds")),
        state=_state(as_table(raw, "state")),
        approvals=approvals_settings.parse(as_table(raw, "approvals")),
        telemetry=_telemetry(as_table(raw, "telemetry")),
        vm=_vm(as_table(raw, "vm")),
        health=health_settings.parse(as_table(raw, "health")) if "health" in raw else None,
    )
    sinks_raw = raw.get("sinks", [{"type": "stdout"}])
    if not isinstance(sinks_raw, list):
        raise ConfigError("sinks: must be an array of tables ([[sinks]])")
    settings.sinks = _sinks(sinks_raw)
    return settings


def parse_sink_spec(spec: str, where: str = "--sink") -> dict[str, Any]:
    """``stdout``, ``stdout:json``, ``stdout:pretty``, ``file:PATH`` or ``webhook:URL`` as a sink table."""
    kind, sep, rest = spec.partition(":")
    if kind == "stdout" and not sep:
        return {"type": "stdout"}
    if kind == "stdout" and rest in ("json", "pretty"):
        return {"type": "stdout", "format": rest}
    if kind == "file" and rest:
        return {"type": "file", "path": rest}
    if kind == "webhook" and rest:
        return {"type": "webhook", "url": rest}
    raise ConfigError(
        f"{where}: not a sink spec; use stdout, stdout:pretty, stdout:json, file:PATH or webhook:URL"
    )


# -- sections ----------------------------------------------------------------------------------


def _imds(t: dict[str, Any]) -> ImdsSettings:
    s = ImdsSettings()
    no_unknown(
        t, "imds",
        ("url", "api_version", "poll_interval", "timeout", "first_call_timeout", "lease_files",
         "max_backoff"),
    )
    if "url" in t:
        if isinstance(t["url"], str) and t["url"].strip().lower() == "discover":
            s.url = "discover"  # DHCP option 245 in the lease files (discovery.py)
        else:
            s.url = as_http_url(t["url"], "imds.url")
    if "lease_files" in t:
        s.lease_files = _string_list(t["lease_files"], "imds.lease_files")
    if "api_version" in t:
        s.api_version = as_str(t["api_version"], "imds.api_version")
        if s.api_version not in KNOWN_API_VERSIONS:
            raise ConfigError(
                f"imds.api_version: {s.api_version!r} is not a known version "
                f"({', '.join(KNOWN_API_VERSIONS)})"
            )
    if "poll_interval" in t:
        s.poll_interval = as_number(t["poll_interval"], "imds.poll_interval", 0.05, 300)
    if "timeout" in t:
        s.timeout = as_number(t["timeout"], "imds.timeout", 0.1, 120)
    if "first_call_timeout" in t:
        s.first_call_timeout = as_number(t["first_call_timeout"], "imds.first_call_timeout", 0.1, 600)
    if "max_backoff" in t:
        s.max_backoff = as_number(t["max_backoff"], "imds.max_backoff", 0.1, 3600)
    return s


def _vm(t: dict[str, Any]) -> VmSettings:
    no_unknown(t, "vm", ("tags",))
    s = VmSettings()
    if "tags" in t:
        s.tags = _string_list(t["tags"], "vm.tags")
        folded = [name.casefold() for name in s.tags]
        if len(set(folded)) != len(folded):
            raise ConfigError("vm.tags: a tag is named twice (Azure tag names ignore case)")
    return s


def _string_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{where}: must be a list of non-empty strings, e.g. [\"tier\", \"app\"]")
    return list(value)


def _state(t: dict[str, Any]) -> StateSettings:
    no_unknown(t, "state", ("dir", "retention_days"))
    s = StateSettings()
    if "dir" in t:
        s.dir = Path(as_str(t["dir"], "state.dir")).expanduser()
    if "retention_days" in t:
        # At least 2 days: a prepare hook's record must outlive any event still Scheduled.
        s.retention = as_number(t["retention_days"], "state.retention_days", 2, 3650) * 86400.0
    return s


def _telemetry(t: dict[str, Any]) -> TelemetrySettings:
    no_unknown(
        t, "telemetry",
        ("log_format", "log_level", "otlp_endpoint", "prometheus_port", "prometheus_host",
         "unhealthy_after"),
    )
    s = TelemetrySettings()
    if "log_format" in t:
        s.log_format = as_choice(t["log_format"], "telemetry.log_format", ("auto", "json", "text"))
    if "log_level" in t:
        s.log_level = as_choice(
            t["log_level"], "telemetry.log_level", ("debug", "info", "warning", "error")
        )
    if "otlp_endpoint" in t:
        value = as_str(t["otlp_endpoint"], "telemetry.otlp_endpoint")
        s.otlp_endpoint = as_http_url(value, "telemetry.otlp_endpoint") if value else ""
        host = urlsplit(s.otlp_endpoint).hostname or ""
        if s.otlp_endpoint.lower().startswith("http://") and not is_loopback(host):
            raise ConfigError(f"telemetry.otlp_endpoint: {s.otlp_endpoint!r} is plain http to "
                              f"{host}, which is not loopback; use https (or a collector on "
                              "127.0.0.1)")
    if "prometheus_port" in t:
        s.prometheus_port = as_int(t["prometheus_port"], "telemetry.prometheus_port", 0, 65535)
    if "prometheus_host" in t:
        s.prometheus_host = as_str(t["prometheus_host"], "telemetry.prometheus_host")
    if "unhealthy_after" in t:
        s.unhealthy_after = as_number(t["unhealthy_after"], "telemetry.unhealthy_after", 1, 86400)
    return s


def _sinks(items: list[Any]) -> list[SinkSettings]:
    from . import sinks

    out: list[SinkSettings] = []
    names: set[str] = set()
    for i, item in enumerate(items):
        where = f"sinks[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: must be a table")
        kind = item.get("type")
        if kind not in sinks.SINK_TYPES:
            raise ConfigError(
                f"{where}.type: {kind!r} is not a sink type ({', '.join(sinks.SINK_TYPES)})"
            )
        raw = {k: v for k, v in item.items() if k not in ("type", "heartbeat_interval")}
        options = sinks.validate(kind, raw, where)
        name = options.name or sinks.default_name(kind, options)
        if name in names:
            raise ConfigError(f"{where}.name: {name!r} is used by another sink; give each a name")
        names.add(name)
        heartbeat = 0.0
        if "heartbeat_interval" in item:  # every sink type: the delivery worker sends them
            heartbeat = as_number(item["heartbeat_interval"], f"{where}.heartbeat_interval", 0, 86400)
            if 0 < heartbeat < 1:
                raise ConfigError(f"{where}.heartbeat_interval: {heartbeat} is below 1 second "
                                  "(0 turns heartbeats off)")
        out.append(SinkSettings(type=kind, name=name, options=options, heartbeat_interval=heartbeat))
    return out


# -- helpers -----------------------------------------------------------------------------------


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX):].lower()
        if rest == "config":
            continue  # the --config file itself (click reads it), not a setting
        if rest == "sinks":
            specs = [s.strip() for s in value.split(",") if s.strip()]
            out["sinks"] = [parse_sink_spec(s, f"{name}={s!r}") for s in specs]
            continue
        section, _, key = rest.partition("_")
        if section not in ("imds", "state", "approvals", "telemetry", "vm", "health") or not key:
            raise ConfigError(f"environment variable {name}: unknown setting")
        target = out.setdefault(section, {})
        if section == "approvals":
            for sub in ("queue", "hooks"):
                if key.startswith(sub + "_"):
                    target = target.setdefault(sub, {})
                    key = key[len(sub) + 1:]
                    break
        target[key] = _env_value(value)
    return out


def _env_value(text: str) -> Any:
    """Environment values are TOML values when they parse as one (true, 1.5, [..]), else strings."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    if isinstance(value, datetime.date | datetime.time):
        return text  # "2020-07-01" is an api-version here, not a TOML date
    return value


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
