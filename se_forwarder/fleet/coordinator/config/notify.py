"""``[[notify]]`` in ``coordinator.toml``: the chat hooks, one table per hook. Validated once::

    [[notify]]
    format = "teams"                      # teams (Adaptive Card, Workflows webhook) | slack (Block Kit)
    url_env = "SE_TEAMS_WEBHOOK_URL"      # the hook's URL, from an environment variable ...
    # url_file = "/etc/se-forwarder/teams.url"   # ... or a file (the URL is the secret)
    decisions = ["approve", "defer", "breach", "pause", "resume", "hold", "release",
                 "acknowledge"]                                                    # the default
    events = ["scheduled", "started", "completed"]                                     # the default

The hook's URL is a secret: it is read from its variable or file when the notifier starts
(``hook_url``), never from this file. What is sent, and when: output/chat.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .... import notify
from ....errors import ConfigError
from ....validation import as_choice, as_http_url, as_str, is_loopback, no_unknown, public_url

DECISIONS = ("approve", "defer", "breach", "pause", "resume", "hold", "release", "acknowledge")
EVENTS = ("scheduled", "started", "completed")  # what [[notify]] events = [...] may name


@dataclass(frozen=True)
class NotifySettings:
    format: str
    url_env: str = ""
    url_file: str = ""
    decisions: tuple[str, ...] = DECISIONS
    events: tuple[str, ...] = EVENTS

    @property
    def where(self) -> str:
        return f"notify ({self.format}, {self.url_env or self.url_file})"


def load_notify(raw: Any) -> tuple[NotifySettings, ...]:
    """The ``[[notify]]`` tables; ConfigError naming the key otherwise."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("notify: must be an array of tables ([[notify]])")
    out = []
    for i, t in enumerate(raw):
        where = f"notify[{i}]"
        if not isinstance(t, dict):
            raise ConfigError(f"{where}: must be a table")
        no_unknown(t, where, ("format", "url_env", "url_file", "decisions", "events"))
        fmt = as_choice(t.get("format", ""), f"{where}.format", notify.FORMATS)
        sources = [k for k in ("url_env", "url_file") if t.get(k)]
        if len(sources) != 1:
            raise ConfigError(f"{where}: give exactly one of url_env or url_file (the hook's URL is a "
                              "secret: never in this file)")
        env = as_str(t.get("url_env", ""), f"{where}.url_env").strip()
        file = as_str(t.get("url_file", ""), f"{where}.url_file").strip()
        if env and (env.startswith(("http:", "https:")) or not env.replace("_", "a").isalnum()):
            raise ConfigError(f"{where}.url_env: {env!r} is not an environment variable name "
                              "(give the variable's name, not the URL)")
        decisions = _kinds(t.get("decisions", list(DECISIONS)), f"{where}.decisions", DECISIONS)
        events = _kinds(t.get("events", list(EVENTS)), f"{where}.events", EVENTS)
        if not decisions and not events:
            raise ConfigError(f"{where}: decisions and events are both empty: this hook would get nothing")
        out.append(NotifySettings(fmt, env, str(Path(file).expanduser()) if file else "", decisions, events))
    return tuple(out)


def _kinds(value: Any, where: str, known: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list):
        example = ", ".join(f'"{k}"' for k in known[:2])
        raise ConfigError(f"{where}: must be a list of {', '.join(known)} (e.g. [{example}]), not {value!r}")
    for j, item in enumerate(value):
        as_choice(item, f"{where}[{j}]", known)
    return tuple(dict.fromkeys(value))


def hook_url(settings: NotifySettings) -> str:
    """The hook's URL from its variable or file; https unless the host is loopback."""
    where = settings.where
    if settings.url_env:
        url = os.environ.get(settings.url_env, "").strip()
        if not url:
            raise ConfigError(f"{where}: the environment variable {settings.url_env} is not set or empty")
    else:
        try:
            url = Path(settings.url_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: cannot read {settings.url_file} "
                              f"({getattr(exc, 'strerror', None) or exc})") from None
        if not url:
            raise ConfigError(f"{where}: {settings.url_file} holds no URL")
    url = as_http_url(url, where)
    from urllib.parse import urlsplit

    if urlsplit(url).scheme != "https" and not is_loopback(urlsplit(url).hostname or ""):
        raise ConfigError(f"{where}: {public_url(url)} must be https (plain http only to loopback)")
    return url
