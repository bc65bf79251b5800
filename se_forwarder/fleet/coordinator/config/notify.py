"""``[[notify]]`` in ``coordinator.toml``: chat hooks and pagers, one table each. Validated once::

    [[notify]]
    format = "teams"                      # teams (Adaptive Card, Workflows webhook) | slack (Block Kit)
    url_env = "SE_TEAMS_WEBHOOK_URL"      # the hook's URL, from an environment variable ...
    # url_file = "/etc/se-forwarder/teams.url"   # ... or a file (the URL is the secret)
    decisions = ["approve", "defer", "breach", "pause", "resume", "hold", "release",
                 "acknowledge", "gate"]              # the default (gate: a [[gates]] gate closes or opens)
    events = ["scheduled", "started", "completed"]                                     # the default
    alerts = ["recovery-timeout"]          # the default: one message when each opens and closes

    [[notify]]
    format = "pagerduty"                  # PagerDuty Events API v2
    routing_key_env = "SE_PAGERDUTY_ROUTING_KEY"   # the integration key, or routing_key_file
    alerts = ["breach", "acknowledge-refused", "feed-refused", "fold-stalled", "fold-gap",
              "fold-late", "name-conflict", "key-conflict", "recovery-timeout",
              "gate-closed"]                                                   # the default
    # url = "https://events.pagerduty.com/v2/enqueue"   # the default
    # ca_file = ""                        # a PEM bundle to trust besides the system's (a proxy's CA)

    [[notify]]
    format = "opsgenie"                   # Opsgenie Alert API
    api_key_env = "SE_OPSGENIE_API_KEY"   # an API integration's key, or api_key_file
    region = "us"                         # us | eu (api.eu.opsgenie.com); or url = "https://..."
    tags = []                             # added to every alert's own

The hook's URL and the pagers' keys are secrets: each is read from its variable or file when the
notifier starts (``hook_url``, ``pager_key``), never from this file. What is sent, and when:
output/chat.py (chat: decisions, events, and the alerts of view/alerts.py the fold derives, when each
opens and when it is resolved), output/alerting.py and output/pager.py (pagers, alerts of view/alerts.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .... import notify
from ....errors import ConfigError
from ....validation import as_choice, as_http_url, as_str, as_tables, is_loopback, no_unknown, public_url

DECISIONS = ("approve", "defer", "breach", "pause", "resume", "hold", "release", "acknowledge", "gate")
EVENTS = ("scheduled", "started", "completed")  # what [[notify]] events = [...] may name
ALERTS = ("breach", "acknowledge-refused", "feed-refused", "fold-stalled", "fold-gap", "fold-late",
          "name-conflict", "key-conflict", "recovery-timeout", "gate-closed")  # view/alerts.py's KINDS
PAGERS = ("pagerduty", "opsgenie")
FORMATS = (*notify.FORMATS, *PAGERS)
PAGER_URLS = {"pagerduty": "https://events.pagerduty.com/v2/enqueue", "us": "https://api.opsgenie.com",
              "eu": "https://api.eu.opsgenie.com"}
CHAT_KEYS = ("format", "url_env", "url_file", "decisions", "events", "alerts")
CHAT_ALERTS = ("recovery-timeout",)  # a chat hook's default alerts (a gate has its own messages: "gate")
PAGER_KEYS = {"pagerduty": ("format", "routing_key_env", "routing_key_file", "url", "ca_file", "alerts"),
              "opsgenie": ("format", "api_key_env", "api_key_file", "region", "url", "ca_file", "alerts",
                           "tags")}
SECRET = {"pagerduty": ("routing_key", "routing key"), "opsgenie": ("api_key", "API key")}
ROUTING_KEY = re.compile(r"^[A-Za-z0-9]{32}\Z")
API_KEY = re.compile(r"^[\x21-\x7e]{8,256}\Z")
TAG = re.compile(r"^[^\s,]{1,50}\Z")


@dataclass(frozen=True)
class NotifySettings:
    format: str
    url_env: str = ""
    url_file: str = ""
    decisions: tuple[str, ...] = DECISIONS
    events: tuple[str, ...] = EVENTS
    key_env: str = ""  # a pager's routing key / API key: its variable ...
    key_file: str = ""  # ... or its file
    url: str = ""  # a pager's endpoint (PagerDuty's enqueue URL, Opsgenie's API base)
    ca_file: str = ""
    alerts: tuple[str, ...] = CHAT_ALERTS  # a pager's default is every kind (ALERTS: _pager)
    tags: tuple[str, ...] = ()

    @property
    def pager(self) -> bool:
        return self.format in PAGERS

    @property
    def where(self) -> str:
        return f"notify ({self.format}, {self.key_env or self.key_file or self.url_env or self.url_file})"


def load_notify(raw: Any) -> tuple[NotifySettings, ...]:
    """The ``[[notify]]`` tables; ConfigError naming the key otherwise."""
    if raw is None:
        return ()
    out = []
    for _, where, t in as_tables(raw, "notify"):
        fmt = as_choice(t.get("format", ""), f"{where}.format", FORMATS)
        out.append(_pager(t, where, fmt) if fmt in PAGERS else _chat(t, where, fmt))
    return tuple(out)


def _chat(t: dict[str, Any], where: str, fmt: str) -> NotifySettings:
    no_unknown(t, where, CHAT_KEYS)
    env, file = _secret_source(t, where, "url", "the hook's URL")
    decisions = _kinds(t.get("decisions", list(DECISIONS)), f"{where}.decisions", DECISIONS)
    events = _kinds(t.get("events", list(EVENTS)), f"{where}.events", EVENTS)
    alerts = _kinds(t.get("alerts", list(CHAT_ALERTS)), f"{where}.alerts", ALERTS)
    if not decisions and not events and not alerts:
        raise ConfigError(f"{where}: decisions, events and alerts are all empty: this hook would get nothing")
    return NotifySettings(fmt, env, file, decisions, events, alerts=alerts)


def _pager(t: dict[str, Any], where: str, fmt: str) -> NotifySettings:
    name, what = SECRET[fmt]
    if name in t:
        raise ConfigError(f"{where}.{name}: a secret never goes in this file; give {name}_env (an "
                          f"environment variable) or {name}_file (a file) holding the {what}")
    if "url_env" in t or "url_file" in t or "decisions" in t or "events" in t:
        wrong = next(k for k in ("url_env", "url_file", "decisions", "events") if k in t)
        raise ConfigError(f"{where}.{wrong}: only for chat formats (teams, slack); a {fmt} pager takes "
                          f"{name}_env or {name}_file, and alerts")
    no_unknown(t, where, PAGER_KEYS[fmt])
    env, file = _secret_source(t, where, name, f"the {what}")
    if fmt == "opsgenie" and "url" in t and "region" in t:
        raise ConfigError(f"{where}: give region or url, not both (url replaces the region's endpoint)")
    region = as_choice(t.get("region", "us"), f"{where}.region", ("us", "eu")) if fmt == "opsgenie" else ""
    url = _url(t.get("url", PAGER_URLS[region or fmt]), f"{where}.url")
    alerts = _kinds(t.get("alerts", list(ALERTS)), f"{where}.alerts", ALERTS)
    if not alerts:
        raise ConfigError(f"{where}.alerts: empty: this pager would get nothing")
    tags = t.get("tags", [])
    if not isinstance(tags, list) or len(tags) > 17 or not all(isinstance(x, str) and TAG.match(x)
                                                                for x in tags):
        raise ConfigError(f"{where}.tags: must be a list of at most 17 tags of 1 to 50 characters without "
                          "spaces or commas, e.g. [\"team-infra\"]")
    ca_file = str(Path(as_str(t["ca_file"], f"{where}.ca_file")).expanduser()) if t.get("ca_file") else ""
    return NotifySettings(fmt, key_env=env, key_file=file, url=url, ca_file=ca_file, alerts=alerts,
                          tags=tuple(dict.fromkeys(tags)), decisions=(), events=())


def _secret_source(t: dict[str, Any], where: str, name: str, what: str) -> tuple[str, str]:
    """(variable, file) of a secret given as ``<name>_env`` or ``<name>_file``: exactly one."""
    given = [k for k in (f"{name}_env", f"{name}_file") if t.get(k)]
    if len(given) != 1:
        raise ConfigError(f"{where}: give exactly one of {name}_env or {name}_file ({what} is a secret: "
                          "never in this file)")
    env = as_str(t.get(f"{name}_env", ""), f"{where}.{name}_env").strip()
    file = as_str(t.get(f"{name}_file", ""), f"{where}.{name}_file").strip()
    if env and not env.replace("_", "a").isalnum():
        shown = repr(env) if name == "url" and env.startswith(("http:", "https:")) else "the value given"
        raise ConfigError(f"{where}.{name}_env: {shown} is not an environment variable name (give the "
                          f"variable's name, not the {'URL' if name == 'url' else 'key'})")
    return env, str(Path(file).expanduser()) if file else ""


def _url(value: Any, where: str) -> str:
    url = as_http_url(value, where).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme != "https" and not is_loopback(parts.hostname or ""):
        raise ConfigError(f"{where}: {public_url(url)} must be https (plain http only to loopback)")
    return url


def _kinds(value: Any, where: str, known: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list):
        example = ", ".join(f'"{k}"' for k in known[:2])
        raise ConfigError(f"{where}: must be a list of {', '.join(known)} (e.g. [{example}]), not {value!r}")
    for j, item in enumerate(value):
        as_choice(item, f"{where}[{j}]", known)
    return tuple(dict.fromkeys(value))


def _read(settings: NotifySettings, env: str, file: str, what: str) -> str:
    where = settings.where
    if env:
        text = os.environ.get(env, "").strip()
        if not text:
            raise ConfigError(f"{where}: the environment variable {env} is not set or empty (for {what})")
        return text
    try:
        text = Path(file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read {file} ({getattr(exc, 'strerror', None) or exc})") from None
    if not text:
        raise ConfigError(f"{where}: {file} holds no {what}")
    return text


def hook_url(settings: NotifySettings) -> str:
    """The hook's URL from its variable or file; https unless the host is loopback."""
    url = as_http_url(_read(settings, settings.url_env, settings.url_file, "URL"), settings.where)
    if urlsplit(url).scheme != "https" and not is_loopback(urlsplit(url).hostname or ""):
        raise ConfigError(f"{settings.where}: {public_url(url)} must be https (plain http only to loopback)")
    return url


def pager_key(settings: NotifySettings) -> str:
    """A pager's routing key or API key from its variable or file: one line of the key's shape.
    The ConfigError names where it came from, never the value."""
    name, what = SECRET[settings.format]
    text = _read(settings, settings.key_env, settings.key_file, f"the {what}")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    pattern, shape = (ROUTING_KEY, "32 letters and digits (an Events API v2 integration key)") \
        if settings.format == "pagerduty" else (API_KEY, "8 or more printable characters")
    if len(lines) != 1 or not pattern.match(lines[0]):
        raise ConfigError(f"{settings.where}: the {what} is not {shape} ({len(text)} characters read; the "
                          "value is not shown)")
    return lines[0]
