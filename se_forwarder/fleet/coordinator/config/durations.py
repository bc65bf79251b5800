"""Durations and moments as ``coordinator.toml`` writes them: ``"30s"``, ``"10m"``, ``"2h"``, ``"1d"``
(or a number of seconds), and RFC 3339 date-times with an offset. Pure."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from ....errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*\Z")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
DAY = 86400.0


def parse_duration(value: Any, where: str, low: float = 0.0, high: float = 90 * DAY) -> float:
    """Seconds (a number) or "30s" / "10m" / "2h" / "1d" -> seconds, within ``low..high``."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: must be a duration like 30s, 10m or 2h, not {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ConfigError(f"{where}: {value!r} is not a duration like 30s, 10m or 2h")
    if not math.isfinite(seconds) or not low <= seconds <= high:
        raise ConfigError(f"{where}: {value!r} is out of range ({human(low)}..{human(high)})")
    return seconds


def human(seconds: float) -> str:
    """A duration as the file writes it: ``90m`` is ``90m``, ``3600`` is ``1h``, ``2.5`` is ``2.5s``."""
    for unit, size in (("d", DAY), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def moment(value: Any, where: str) -> float:
    """An RFC 3339 date-time with its offset (a string or a TOML offset date-time) -> epoch seconds."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ConfigError(f"{where}: {value!r} is not an RFC 3339 date-time") from None
    if not isinstance(value, datetime):
        raise ConfigError(f"{where}: {value!r} is not a date-time")
    if value.tzinfo is None:
        raise ConfigError(f"{where}: give the offset (Z for UTC), e.g. 2026-12-24T00:00:00Z")
    return value.timestamp()
