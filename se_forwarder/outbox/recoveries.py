"""Pending recoveries: the events that affected this VM and completed, until it is reported back.

The recovery step (``approvals/recovery.py``) reads the ``completed`` CloudEvents recorded since
its cursor (the meta key ``recovery_cursor``, an ``events.seq``) and adds a row here for each one
that affected this VM, moving the cursor in the same transaction; a row leaves when its
``recovered`` CloudEvent is recorded or when it never will be (its recover hook failed). Rows and
cursor are on disk, so a pending recovery survives a crash (SIGKILL) and a restart, and the
``recovered`` CloudEvent's deterministic id (``<EventId>/recovered``, deduplicated by the outbox)
keeps a recovery recorded just before a crash from being sent twice.

On the first start of an agent whose state directory has none, the cursor starts after the events
already recorded: completions from before the agent could report recoveries are not reported.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .transaction import Transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS recoveries (
    event_id TEXT PRIMARY KEY,
    event TEXT NOT NULL,
    completed_at REAL NOT NULL
);
"""
CURSOR = "recovery_cursor"


@dataclass(frozen=True)
class Completed:
    """A ``completed`` CloudEvent of the outbox: its seq, EventId, time and ``data``."""

    seq: int
    event_id: str
    observed_at: float
    data: dict[str, Any]


@dataclass(frozen=True)
class Pending:
    """An event that completed and is not yet reported ``recovered``."""

    event_id: str
    event: dict[str, Any]  # the IMDS event as last seen, and "incarnation"
    completed_at: float


class Recoveries:
    """The pending recoveries of one outbox database (use it from the thread that opened it)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def begin(self) -> None:
        """Start the cursor after the events recorded so far, unless it exists."""
        with Transaction(self._db):
            self._db.execute(
                "INSERT OR IGNORE INTO meta (key, value) "
                "SELECT ?, CAST(COALESCE(MAX(seq), 0) AS TEXT) FROM events", (CURSOR,))

    def completed_since_cursor(self, limit: int = 100) -> list[Completed]:
        """The ``completed`` CloudEvents after the cursor, oldest first."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (CURSOR,)).fetchone()
        cursor = int(row[0]) if row is not None else 0
        rows = self._db.execute(
            "SELECT seq, event_id, observed_at, payload FROM events WHERE seq > ? AND state = ? "
            "ORDER BY seq LIMIT ?", (cursor, "completed", limit)).fetchall()
        out = []
        for seq, event_id, observed_at, payload in rows:
            try:
                data = json.loads(payload).get("data")
            except (ValueError, AttributeError):
                data = None
            out.append(Completed(seq, event_id, observed_at, data if isinstance(data, dict) else {}))
        return out

    def add(self, seen: Sequence[Completed], pending: Sequence[Pending]) -> None:
        """Add ``pending`` and move the cursor past ``seen``, in one transaction."""
        if not seen:
            return
        with Transaction(self._db):
            self._db.executemany(
                "INSERT OR IGNORE INTO recoveries (event_id, event, completed_at) VALUES (?, ?, ?)",
                [(p.event_id, json.dumps(p.event, sort_keys=True), p.completed_at) for p in pending])
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (CURSOR, str(max(c.seq for c in seen))))

    def pending(self) -> list[Pending]:
        """Every pending recovery, oldest completion first (none in a read-only database an older
        version made)."""
        try:
            rows = self._db.execute(
                "SELECT event_id, event, completed_at FROM recoveries ORDER BY completed_at, event_id"
            ).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        return [Pending(event_id, json.loads(event), completed_at) for event_id, event, completed_at in rows]

    def done(self, event_id: str) -> None:
        """``event_id``'s recovery was reported (or never will be)."""
        self._db.execute("DELETE FROM recoveries WHERE event_id = ?", (event_id,))
