"""The words of verdicts and decisions: times, durations and who acted, as people read them."""

from __future__ import annotations

from datetime import UTC, datetime

from .events import COORDINATOR


def hhmm(moment: float | None, seconds: bool = False) -> str:
    """A moment as people read it in a reason: ``2026-11-25 19:05 UTC`` (``19:05:30`` with ``seconds``)."""
    if moment is None:
        return "unknown"
    return datetime.fromtimestamp(moment, UTC).strftime(f"%Y-%m-%d %H:%M{':%S' if seconds else ''} UTC")


def span(seconds: float) -> str:
    """A duration in its largest whole unit: ``45s``, ``12 min``, ``3 h``, ``2 d``."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def who(data: dict[str, object]) -> str:
    """Who made a decision: its ``Actor``, else the coordinator."""
    actor = data.get("Actor")
    return actor if isinstance(actor, str) and actor else COORDINATOR


def not_watched(name: str, beat: float | None, now: float) -> str:
    """A ``not-watched`` reason: the VM, and when its agent's last heartbeat came."""
    if beat is None:
        return f"{name} is not watched (no heartbeat yet)"
    return f"{name} is not watched (last heartbeat {span(now - beat)} ago)"


def prepare_failed(name: str, said: str) -> str:
    """A ``prepare-failed`` reason: the VM, and what its prepare hook said."""
    return f"prepare failed on {name}" + (f": {said}" if said else "")


def why(data: dict[str, object]) -> str:
    """``": <Reason>"`` of a decision, or nothing."""
    reason = data.get("Reason")
    return f": {reason}" if isinstance(reason, str) and reason else ""
