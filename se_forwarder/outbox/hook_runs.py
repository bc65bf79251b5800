"""Hook runs: one row per event and hook (prepare, recover), written before the command starts.

The row is what makes a hook run at most once across restarts: a run found ``running`` when the
agent starts was interrupted and is never run again. ``event`` keeps the event as last seen (JSON,
with its document incarnation), so recover gets the last status even after the event is gone.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

SCHEMA = """
CREATE TABLE IF NOT EXISTS approval_hook_runs (
    event_id TEXT NOT NULL,
    hook TEXT NOT NULL,
    state TEXT NOT NULL,
    event TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    exit_code INTEGER,
    detail TEXT,
    PRIMARY KEY (event_id, hook)
);
"""

PREPARE, RECOVER = "prepare", "recover"
RUNNING, SUCCEEDED, FAILED, TIMED_OUT, INTERRUPTED = (
    "running", "succeeded", "failed", "timed-out", "interrupted",
)
NONE = "none"  # no command configured: the row only tracks the event (for recover)


@dataclass(frozen=True)
class HookRun:
    event_id: str
    hook: str
    state: str
    event: str  # the stored event JSON
    started_at: float


class HookRuns:
    """The hook-run rows of one outbox database (use it from the thread that opened the outbox)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def state(self, event_id: str, hook: str) -> str | None:
        """The run's state (None: never started)."""
        row = self._db.execute(
            "SELECT state FROM approval_hook_runs WHERE event_id = ? AND hook = ?", (event_id, hook)
        ).fetchone()
        return None if row is None else row[0]

    def all(self, state: str | None = None) -> list[HookRun]:
        """Every run (or those in ``state``)."""
        sql = "SELECT event_id, hook, state, event, started_at FROM approval_hook_runs"
        rows = (self._db.execute(sql + " WHERE state = ?", (state,)) if state is not None
                else self._db.execute(sql))
        return [HookRun(*row) for row in rows.fetchall()]

    def begin(self, event_id: str, hook: str, state: str, event: str) -> None:
        """Record a run before its command starts (committed at once); an existing row stays."""
        self._db.execute(
            "INSERT OR IGNORE INTO approval_hook_runs (event_id, hook, state, event, started_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (event_id, hook, state, event, time.time()),
        )

    def update_event(self, event_id: str, hook: str, event: str) -> None:
        """Keep the latest version of the run's event."""
        self._db.execute("UPDATE approval_hook_runs SET event = ? WHERE event_id = ? AND hook = ?",
                         (event, event_id, hook))

    def finish(self, event_id: str, hook: str, state: str, detail: str,
               exit_code: int | None = None, ended_at: float | None = None) -> None:
        """The run ended (or was found interrupted)."""
        self._db.execute(
            "UPDATE approval_hook_runs SET state = ?, ended_at = ?, exit_code = ?, detail = ? "
            "WHERE event_id = ? AND hook = ?",
            (state, time.time() if ended_at is None else ended_at, exit_code, detail, event_id, hook),
        )

    def forget_finished(self, started_before: float) -> int:
        """Drop the runs of events whose recover was started, that began before
        ``started_before`` and are not running; how many were dropped."""
        cur = self._db.execute(
            "DELETE FROM approval_hook_runs WHERE started_at < ? AND state != ? AND event_id IN "
            "(SELECT event_id FROM approval_hook_runs WHERE hook = ?)",
            (started_before, RUNNING, RECOVER),
        )
        return cur.rowcount
