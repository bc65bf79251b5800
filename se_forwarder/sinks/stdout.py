"""stdout sink: one structured CloudEvent JSON per line, or readable columns for people (``pretty.py``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ..errors import ConfigError
from ..validation import as_bool, as_choice, no_unknown
from .base import Delivered, DeliveryReport, Outcome, Park, SinkOptions, StoredEvent, sink_name
from .pretty import PrettyFormatter


@dataclass(frozen=True, kw_only=True)
class StdoutOptions(SinkOptions):
    """One ``[[sinks]] type = "stdout"`` table, checked."""

    format: str = "json"  # or "pretty": columns for people
    explain: bool = False  # pretty only: say why each line was written

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> StdoutOptions:
        no_unknown(table, where, ("name", "format", "explain"))
        name = sink_name(table, where)
        fmt = as_choice(table.get("format", cls.format), f"{where}.format", ("json", "pretty"))
        explain = as_bool(table.get("explain", cls.explain), f"{where}.explain")
        if explain and fmt != "pretty":
            raise ConfigError(f'{where}.explain: only with format = "pretty"')
        return cls(name=name, format=fmt, explain=explain)


def validate(options: dict[str, Any], where: str) -> StdoutOptions:
    return StdoutOptions.parse(options, where)


def create(name: str, options: StdoutOptions, ctx: Any) -> StdoutSink:
    return StdoutSink(name, ctx.stdout, options.format, options.explain)


class StdoutSink:
    max_batch = 500

    def __init__(self, name: str, stream: TextIO, fmt: str = "json", explain: bool = False) -> None:
        self.name = name
        self._stream = stream
        self._format = fmt
        self._pretty = PrettyFormatter(explain) if fmt == "pretty" else None

    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport:
        outcomes: list[Outcome] = []
        try:
            for event in batch:
                if self._pretty is not None:
                    line = "\n".join(self._pretty.lines(event.as_dict()))
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
