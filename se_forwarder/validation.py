"""Small validators shared by the config loader and the sinks: each names the key it rejects."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

from .errors import ConfigError


def as_table(raw: Mapping[str, Any], key: str, where: str | None = None) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where or key}: must be a table")
    return value


def as_tables(items: Any, key: str) -> list[tuple[int, str, dict[str, Any]]]:
    """``[[key]]``: each table with its index and where it is (``key[i]``)."""
    if not isinstance(items, list):
        raise ConfigError(f"{key}: must be an array of tables ([[{key}]])")
    out = []
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: must be a table")
        out.append((i, where, item))
    return out


def no_unknown(t: Mapping[str, Any], where: str, known: tuple[str, ...]) -> None:
    for key in t:
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(known)})")


def as_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: must be a string, not {type(value).__name__}")
    return value


def as_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: must be true or false, not {value!r}")
    return value


def as_number(value: Any, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: must be a number, not {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{where}: {value} is out of range ({low}..{high})")
    return float(value)


def as_int(value: Any, where: str, low: int, high: int) -> int:
    """An integer in range; 1.5 is refused rather than silently truncated."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: must be a whole number, not {value!r}")
    return int(as_number(value, where, low, high))


def as_choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


def as_http_url(value: Any, where: str) -> str:
    text = as_str(value, where)
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:  # "http://[::1", "http://h:99999": one line, not a traceback
        raise ConfigError(f"{where}: {text!r} is not a valid URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: {text!r} is not an http(s) URL")
    return text.rstrip("/")


def split_http_url(text: str, where: str, what: str = "an http(s) URL") -> SplitResult:
    """``text``'s parts, or ConfigError (showing the URL as ``public_url`` does) for a bad port or
    a URL that is not http(s) with a host."""
    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(f"{where}: bad port in {public_url(text)!r}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: {public_url(text)!r} is not {what}")
    return parts


def api_url(value: Any, where: str) -> str:
    """An API endpoint's URL (a path is allowed): https, or plain http to a loopback address only;
    no credentials, query or fragment. ConfigError naming ``where`` otherwise."""
    text = as_str(value, where).strip().rstrip("/")
    parts = split_http_url(text, where, "an https URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError(f"{where}: give only scheme, host, port and path "
                          "(no credentials, query or fragment)")
    if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        raise ConfigError(f"{where}: plain http is allowed only to a loopback address; use https "
                          "(give ca_file for a private CA)")
    return text


def public_url(url: str) -> str:
    """A URL fit for logs, reasons, `status` and sink names.

    No credentials and no query string (an Azure Functions ``?code=`` key); path segments that
    look like tokens (Slack, Teams and Discord hooks carry their secret in the path) become ``***``:
    20 characters or more, or 6 digits or more.
    """
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return "***"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    segments = [
        "***" if len(seg) >= 20 or sum(c.isdigit() for c in seg) >= 6 else seg
        for seg in parts.path.split("/")
    ]
    return f"{parts.scheme}://{host}{port}{'/'.join(segments)}"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: the only hosts plain http may go to."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_ca_file(path: str, where: str) -> None:
    """A readable PEM bundle with at least one certificate, or one line saying what is wrong."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror or exc}") from exc
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"{where}: {path} holds no PEM certificate (BEGIN CERTIFICATE)")
