"""stdout sink: one structured CloudEvent JSON per line, or a readable line for people (demo)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from ..validation import as_choice, no_unknown
from .base import Delivered, DeliveryReport, Outcome, Park, StoredEvent


def validate(options: dict[str, Any], where: str) -> dict[str, Any]:
    no_unknown(options, where, ("name", "format"))
    options["format"] = as_choice(options.get("format", "json"), f"{where}.format", ("json", "pretty"))
    return options


def create(name: str, options: dict[str, Any], ctx: Any) -> StdoutSink:
    return StdoutSink(name, ctx.stdout, options.get("format", "json"))


def pretty_line(event: dict[str, Any]) -> str:
    """``13:02:11  approved   Freeze    C7061BAC...  incarnation 3  by policy:sample-freeze``."""
    data = event.get("data") or {}
    state = str(event.get("type", "")).rsplit(".", 1)[-1]
    when = str(event.get("time", ""))
    with contextlib.suppress(ValueError):
        when = datetime.fromisoformat(when.replace("Z", "+00:00")).strftime("%H:%M:%S")
    parts = [
        when,
        f"{state:<17}",
        f"{str(event.get('eventtype', '')):<9}",
        str(event.get("subject", "")),
        f"incarnation {event.get('incarnation', '?')}",
    ]
    if data.get("EventSource"):
        parts.append(f"source {data['EventSource']}")
    if data.get("NotBeforeUtc") and state == "scheduled":
        parts.append(f"not before {data['NotBeforeUtc']}")
    if data.get("DurationInSeconds") not in (None, -1):
        parts.append(f"{data['DurationInSeconds']} s")
    if data.get("ApprovedBy"):
        parts.append(f"by {data['ApprovedBy']}")
    if data.get("Reason"):
        parts.append(f"reason: {data['Reason']}")
    if data.get("AffectsThisVm") is False:
        parts.append("(not this VM)")
    return "  ".join(parts)


class StdoutSink:
    max_batch = 500

    def __init__(self, name: str, stream: TextIO, fmt: str = "json") -> None:
        self.name = name
        self._stream = stream
        self._format = fmt

    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport:
        outcomes: list[Outcome] = []
        try:
            for event in batch:
                if self._format == "pretty":
                    line = pretty_line(event.as_dict())
                else:
                    line = json.dumps(event.as_dict(), separators=(",", ":"))
                self._stream.write(line + "\n")
                outcomes.append(Delivered())
            self._stream.flush()
        except (BrokenPipeError, ValueError) as exc:  # ValueError: write to a closed stream
            # Lines written but not flushed may or may not have gone out: at-least-once.
            done = outcomes[:-1] if outcomes else []
            return DeliveryReport([*done, Park(f"stdout is closed: {exc}")])
        return DeliveryReport(outcomes)

    def check(self) -> str | None:
        return None if not self._stream.closed else "stdout is closed"

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()
