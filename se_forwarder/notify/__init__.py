"""Chat notifications: CloudEvents as short messages people read in Microsoft Teams and Slack.

``describe`` (pure) turns one CloudEvent into a ``Notice``; ``teams.payload`` and ``slack.payload``
put a notice into each service's documented webhook body. ``render`` does both. The webhook sink
(``format = "teams" | "slack"``) and the fleet coordinator use this one place.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import slack, teams
from .describe import Notice, describe

FORMATS = ("teams", "slack")

__all__ = ["FORMATS", "Notice", "describe", "render", "slack", "teams"]


def render(fmt: str, event: Any, now: datetime, started_at: datetime | None = None) -> dict[str, Any] | None:
    """The webhook body for ``event`` in ``fmt``; None when the event is not a chat message."""
    notice = describe(event, now, started_at)
    if notice is None:
        return None
    if fmt == "teams":
        return teams.payload(notice)
    if fmt == "slack":
        return slack.payload(notice)
    raise ValueError(f"unknown chat format {fmt!r} (known: {', '.join(FORMATS)})")
