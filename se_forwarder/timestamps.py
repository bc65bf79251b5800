"""RFC 3339 timestamps in UTC, the one way this project writes them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def rfc3339(moment: datetime | float, *, milliseconds: bool = False) -> str:
    """``2024-05-01T12:00:00Z`` (``...:00.123Z`` with ``milliseconds``; sub-second digits as
    Python prints them otherwise). A number is unix seconds; a naive datetime is taken as UTC."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, UTC)
    elif moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.astimezone(UTC).isoformat(timespec="milliseconds" if milliseconds else "auto")
    return text.replace("+00:00", "Z")


def rfc3339_or_none(moment: float | None, *, whole: bool = False) -> str | None:
    """``rfc3339`` of a moment that may be unknown (None); ``whole``: to the second."""
    if moment is None:
        return None
    return rfc3339(int(moment) if whole else moment)


def seconds(value: Any) -> float | None:
    """An RFC 3339 time (UTC when it has no offset) as epoch seconds, or None for anything else."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
