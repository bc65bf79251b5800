"""The outbox's transaction and how a SQLite failure is said to the user."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import StateError


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self._db.execute("COMMIT")
        else:
            self._db.execute("ROLLBACK")


def state_error(path: Path, exc: sqlite3.Error) -> StateError:
    """``exc`` on the database at ``path`` as a StateError that says what to do."""
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        hint = "the state directory is read-only; give the agent a writable --state-dir"
    elif "disk is full" in text or "database or disk is full" in text:
        hint = "the disk is full; free space, nothing recorded so far is lost"
    elif "not a database" in text or "malformed" in text or "corrupt" in text:
        hint = "the file is corrupt; stop the agent and move it aside to start afresh"
    elif "unable to open" in text:
        hint = "the file cannot be opened; check the directory's permissions"
    else:
        hint = "check the state directory"
    return StateError(f"state database {path}: {text} ({hint})")
