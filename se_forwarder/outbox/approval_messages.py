"""The approval-message ledger: which signed approval messages were acted on (replay protection).

A message id is remembered with the queue message that carried it, so the same queue message seen
again (the agent stopped between acting and deleting it) is handled again, while the same signed
message in another queue message is a replay. Ids are forgotten a day after the message expired
(a replay of those is refused as expired anyway).
"""

from __future__ import annotations

import sqlite3
import time

SCHEMA = """
CREATE TABLE IF NOT EXISTS approval_messages (
    message_id TEXT PRIMARY KEY,
    queue_message_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    expires_at REAL NOT NULL,
    processed_at REAL NOT NULL
);
"""
KEEP_AFTER_EXPIRY = 86400.0  # seconds


class ApprovalMessages:
    """The ledger in one outbox database (use it from the thread that opened the outbox)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def seen_before(self, message_id: str, queue_message_id: str) -> bool:
        """A message with this id was processed before, from another queue message (a replay)."""
        row = self._db.execute("SELECT queue_message_id FROM approval_messages WHERE message_id = ?",
                               (message_id,)).fetchone()
        return row is not None and row[0] != queue_message_id

    def remember(self, message_id: str, queue_message_id: str, event_id: str, outcome: str,
                 expires_at: float) -> None:
        """Record what was done with ``message_id`` (the first record stays)."""
        self._db.execute(
            "INSERT OR IGNORE INTO approval_messages "
            "(message_id, queue_message_id, event_id, outcome, expires_at, processed_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (message_id, queue_message_id, event_id, outcome, expires_at, time.time()),
        )

    def outcome(self, message_id: str) -> str | None:
        """What was done with ``message_id`` (``approved``, ``rejected:<reason>``), or None."""
        row = self._db.execute("SELECT outcome FROM approval_messages WHERE message_id = ?",
                               (message_id,)).fetchone()
        return None if row is None else row[0]

    def forget_expired(self, now: float | None = None) -> int:
        """Drop the ids of messages expired more than a day ago; how many were dropped."""
        now = time.time() if now is None else now
        cur = self._db.execute("DELETE FROM approval_messages WHERE expires_at < ?",
                               (now - KEEP_AFTER_EXPIRY,))
        return cur.rowcount
