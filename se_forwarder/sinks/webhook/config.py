"""The webhook sink's options: one frozen dataclass, every key checked once, the defaults in it.

``WebhookOptions.parse`` is cheap: it reads no file and no environment variable. The secrets, header
values from ``{env = ..}`` / ``{file = ..}`` and the CA bundle are read when the sink is created
(``auth.read_secrets``, ``auth.header_values``), so a missing one stops the start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ...validation import (
    as_bool,
    as_choice,
    as_number,
    as_str,
    is_loopback,
    no_unknown,
    split_http_url,
)
from .. import chat
from ..base import SinkOptions, sink_name

MODES = ("structured", "binary", "batch")
AUTHS = ("none", "entra")
KNOWN_KEYS = (
    "name", "url", "mode", "batch_max_events", "batch_max_bytes", "secret_env", "secret_file",
    "headers", "auth", "scope", "client_id", "ca_file", "connect_timeout", "read_timeout",
    "handshake", "format", "events",
)
# Headers the sink owns: a static header may not override them.
RESERVED_HEADERS = frozenset({
    "content-type", "content-length", "host", "transfer-encoding", "connection",
    "webhook-id", "webhook-timestamp", "webhook-signature", "webhook-request-origin",
})
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True, kw_only=True)
class WebhookOptions(SinkOptions):
    """One ``[[sinks]] type = "webhook"`` table, checked.

    ``headers`` maps a name to its value, or to ``{"env": VAR}`` / ``{"file": PATH}`` read at start.
    """

    url: str
    mode: str = "structured"
    batch_max_events: int = 100
    batch_max_bytes: int = 1024 * 1024
    connect_timeout: float = 5.0
    read_timeout: float = 15.0
    handshake: bool = False
    auth: str = "none"
    scope: str | None = None  # with auth = "entra"
    client_id: str | None = None  # a user-assigned identity, with auth = "entra"
    secret_env: tuple[str, ...] = ()
    secret_file: tuple[str, ...] = ()
    headers: Mapping[str, Any] = field(default_factory=dict)
    ca_file: str | None = None
    format: str = "cloudevents"
    events: tuple[str, ...] | None = None  # chat formats: the event kinds posted (None: all)

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> WebhookOptions:
        """Every key of ``table`` checked, or ConfigError naming the first wrong one."""
        no_unknown(table, where, KNOWN_KEYS)
        name = sink_name(table, where)
        if "url" not in table:
            raise ConfigError(f"{where}.url: missing (required for this sink type)")
        url = _url(table["url"], f"{where}.url")
        fmt, events = chat.validate(table, where)
        mode = as_choice(table.get("mode", cls.mode), f"{where}.mode", MODES)
        for key in ("batch_max_events", "batch_max_bytes"):
            if key in table and mode != "batch":
                raise ConfigError(f'{where}.{key}: only applies to mode = "batch"')
        batch_max_events = int(as_number(table.get("batch_max_events", cls.batch_max_events),
                                         f"{where}.batch_max_events", 1, 10_000))
        batch_max_bytes = int(as_number(table.get("batch_max_bytes", cls.batch_max_bytes),
                                        f"{where}.batch_max_bytes", 1024, 64 * 1024 * 1024))
        connect_timeout = as_number(table.get("connect_timeout", cls.connect_timeout),
                                    f"{where}.connect_timeout", 0.1, 120)
        read_timeout = as_number(table.get("read_timeout", cls.read_timeout),
                                 f"{where}.read_timeout", 0.1, 600)
        handshake = as_bool(table.get("handshake", cls.handshake), f"{where}.handshake")
        secret_env = _string_list(table, "secret_env", where)
        secret_file = tuple(str(Path(p).expanduser()) for p in _string_list(table, "secret_file", where))
        ca_file = None
        if "ca_file" in table:
            ca_file = str(Path(as_str(table["ca_file"], f"{where}.ca_file")).expanduser())
        auth = as_choice(table.get("auth", cls.auth), f"{where}.auth", AUTHS)
        scope, client_id = _entra(table, auth, where)
        return cls(
            name=name, url=url, mode=mode, batch_max_events=batch_max_events,
            batch_max_bytes=batch_max_bytes, connect_timeout=connect_timeout,
            read_timeout=read_timeout, handshake=handshake, auth=auth, scope=scope,
            client_id=client_id, secret_env=secret_env, secret_file=secret_file,
            headers=_headers(table.get("headers", {}), auth, where), ca_file=ca_file, format=fmt,
            events=events,
        )


def _url(value: Any, where: str) -> str:
    text = as_str(value, where)
    parts = split_http_url(text, where)
    if parts.username or parts.password:
        raise ConfigError(
            f"{where}: credentials in the URL are not allowed (they would end up in logs); "
            "use headers, a signing secret or auth = \"entra\""
        )
    if parts.fragment:
        raise ConfigError(f"{where}: a URL fragment (#...) is never sent; remove it")
    if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        raise ConfigError(
            f"{where}: plain http is allowed only to a loopback address (127.0.0.1, ::1, "
            "localhost); use https (give ca_file for a private CA)"
        )
    return text


def _string_list(table: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    if key not in table:
        return ()
    value = table[key]
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}.{key}: must be a string or a non-empty list of strings")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{where}.{key}[{i}]: must be a non-empty string")
    return tuple(item.strip() for item in items)


def _entra(table: Mapping[str, Any], auth: str, where: str) -> tuple[str | None, str | None]:
    """(scope, client_id): required and optional with auth = "entra", refused otherwise."""
    if auth != "entra":
        for key in ("scope", "client_id"):
            if key in table:
                raise ConfigError(f'{where}.{key}: only applies to auth = "entra"')
        return None, None
    if "scope" not in table:
        raise ConfigError(f'{where}.scope: missing (required with auth = "entra"), '
                          'e.g. "api://<app-id>/.default"')
    scope = as_str(table["scope"], f"{where}.scope")
    if not scope.strip():
        raise ConfigError(f"{where}.scope: must not be empty")
    client_id = as_str(table["client_id"], f"{where}.client_id") if "client_id" in table else None
    return scope, client_id


def _headers(raw: Any, auth: str, where: str) -> dict[str, Any]:
    """A table of name -> value, where a value is a string or ``{env = "VAR"}`` / ``{file = "PATH"}``."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}.headers: must be a table of header names to values")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        key = f"{where}.headers.{name}"
        low = name.lower()
        if not _HEADER_NAME.match(name):
            raise ConfigError(f"{key}: not a valid HTTP header name")
        if low in RESERVED_HEADERS or low.startswith("ce-") or (
            low == "authorization" and auth == "entra"
        ):
            raise ConfigError(f"{key}: this header is set by the sink and cannot be overridden")
        if isinstance(value, dict):
            if len(value) != 1 or next(iter(value)) not in ("env", "file"):
                raise ConfigError(f'{key}: a table value must be {{env = "VAR"}} or {{file = "PATH"}}')
            source, ref = next(iter(value.items()))
            ref = as_str(ref, f"{key}.{source}")
            out[name] = {source: str(Path(ref).expanduser()) if source == "file" else ref}
        else:
            out[name] = header_text(as_str(value, key), key)
    return out


def header_text(text: str, where: str) -> str:
    """``text`` if an HTTP header can carry it: one line of Latin-1 (anything else fails every POST)."""
    if any(c in text for c in "\r\n\0"):
        raise ConfigError(f"{where}: the value must not contain line breaks")
    try:
        text.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{where}: the value has a character an HTTP header cannot carry (position {exc.start}); "
            "use Latin-1 text"
        ) from None
    return text
