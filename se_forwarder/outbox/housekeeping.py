"""Keeping the state database bounded while the agent runs: prune what only history needs, give the
freed pages back to the file system.

- ``prepare``: when a connection opens the file, it uses ``auto_vacuum=INCREMENTAL`` (a file made by
  an earlier version is converted once, by ``VACUUM``) and a WAL that shrinks back after each
  checkpoint (``journal_size_limit``);
- ``run``: deletes events every sink has passed that are older than the retention, dead letters,
  finished hook runs older than it, and approval-message ids a day after they expired (the replay
  set), then ``PRAGMA incremental_vacuum``. The agent calls it at start and every
  ``INTERVAL_SECONDS`` (``Outbox.housekeep``).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .approval_messages import ApprovalMessages
from .hook_runs import RUNNING
from .transaction import Transaction

log = logging.getLogger("se_forwarder.outbox")

INTERVAL_SECONDS = 3600.0
DEFAULT_RETENTION_SECONDS = 30 * 86400.0
INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL
WAL_LIMIT_BYTES = 4 * 1024 * 1024


def prepare(db: sqlite3.Connection, path: str) -> None:
    """Incremental vacuum on (converting a file made without it) and a bounded WAL. Runs before
    the file is switched to WAL: on a new file the setting then applies from the first page."""
    if db.execute("PRAGMA auto_vacuum").fetchone()[0] != INCREMENTAL:
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        has_tables = db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
        if has_tables:
            started = time.monotonic()
            db.execute("VACUUM")  # rewrites the file once so that the setting takes effect
            log.info("state database %s converted to incremental vacuum in %.1f s", path,
                     time.monotonic() - started)
    db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")


@dataclass(frozen=True)
class Pruned:
    events: int = 0
    dead_letters: int = 0
    hook_runs: int = 0
    approval_messages: int = 0
    pages_freed: int = 0

    @property
    def rows(self) -> int:
        return self.events + self.dead_letters + self.hook_runs + self.approval_messages


def run(db: sqlite3.Connection, active_sinks: Sequence[str], older_than: float,
        now: float | None = None) -> Pruned:
    """Prune rows kept only for history (see the module docstring) and reclaim their space."""
    now = time.time() if now is None else now
    events = 0
    with Transaction(db):
        if active_sinks:
            marks = ",".join("?" for _ in active_sinks)
            low = db.execute(f"SELECT MIN(cursor) FROM sinks WHERE name IN ({marks})",
                             list(active_sinks)).fetchone()[0]
            if low is not None:
                events = db.execute("DELETE FROM events WHERE seq <= ? AND observed_at < ?",
                                    (low, older_than)).rowcount
        dead = db.execute("DELETE FROM dead_letters WHERE at < ? OR seq NOT IN "
                          "(SELECT seq FROM events)", (older_than,)).rowcount
        runs = db.execute("DELETE FROM approval_hook_runs WHERE started_at < ? AND state != ?",
                          (older_than, RUNNING)).rowcount
        messages = ApprovalMessages(db).forget_expired(now)
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    if free:
        db.execute("PRAGMA incremental_vacuum").fetchall()
    return Pruned(events, dead, runs, messages, free)
