"""Per-sink backlog, oldest age and parking, read from the outbox for the gauges and /healthz.

Its own read-only connection (SQLite WAL readers never block the agent's writer), cached for a
second: scrapes, OTLP exports and health probes arrive on different threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("se_forwarder.telemetry")



@dataclass(frozen=True)
class SinkState:
    name: str
    backlog: int
    oldest_age: float  # seconds; 0 when the backlog is empty
    parked: str | None


class SinkReader:
    """Per-sink backlog, oldest age and parking for gauges and /healthz, cached for a second.

    Scrapes, OTLP exports and health probes arrive on different threads: one lock, one connection.
    Only the configured sinks are reported (a removed sink's cursor stays in the database).
    """

    def __init__(self, state_dir: Path, names: Sequence[str], max_age: float = 1.0) -> None:
        self.state_dir = Path(state_dir)
        self.names = list(names)
        self.max_age = max_age
        self._lock = threading.Lock()
        self._box: Any = None
        self._cache: tuple[float, list[SinkState]] | None = None

    def snapshot(self) -> list[SinkState]:
        with self._lock:
            now = time.monotonic()
            if self._cache is not None and now - self._cache[0] < self.max_age:
                return self._cache[1]
            states = self._read()
            self._cache = (now, states)
            return states

    def _read(self) -> list[SinkState]:
        from ..outbox import Outbox

        try:
            if self._box is None:
                self._box = Outbox(self.state_dir, readonly=True)
            now = time.time()
            out = []
            for name in self.names:
                try:
                    st = self._box.sink_status(name)
                except KeyError:
                    continue  # not registered yet
                age = 0.0 if st.oldest_observed_at is None else max(0.0, now - st.oldest_observed_at)
                out.append(SinkState(name, st.backlog, age, st.parked))
            return out
        except Exception as exc:  # noqa: BLE001 - a gauge must never break a scrape
            log.warning("cannot read the outbox for sink metrics: %s", exc)
            self.close_locked()
            return []

    def close_locked(self) -> None:
        if self._box is not None:
            try:
                self._box.close()
            finally:
                self._box = None

    def close(self) -> None:
        with self._lock:
            self.close_locked()
