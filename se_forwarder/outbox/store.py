"""The durable outbox: SQLite in WAL mode in the state directory, and the only owner of its tables.

One transaction holds the new document and the CloudEvents it produced, so a crash at any instant
neither loses a transition nor records it twice. The dedup key is the CloudEvent id
(``<EventId>/<state>``). Every sink has its own cursor: an event leaves a sink's backlog only when that
sink confirmed it (or it was dead-lettered there, with the reason kept).

Each thread opens its own ``Outbox``; SQLite serialises the writers, so sequence numbers are
assigned in commit order and a cursor never skips an event.

Other modules never run SQL: they use the typed methods here, ``approval_messages`` (the ledger of
signed approval messages, ``approval_messages.py``), ``hook_runs`` (``hook_runs.py``) and
``recoveries`` (the pending ``recovered`` reports, ``recoveries.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cloudevents import NewEvent
from ..errors import StateError
from ..model import Document, MalformedDocument, parse_document
from ..sinks.base import StoredEvent
from . import approval_messages, hook_runs, housekeeping, recoveries
from .approval_messages import ApprovalMessages
from .hook_runs import HookRuns
from .transaction import Transaction, state_error

DB_NAME = "outbox.sqlite3"
POLL_MARK = "last-poll"  # its mtime: the last poll with the outcome the meta table holds
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ce_id TEXT NOT NULL UNIQUE,
    event_id TEXT NOT NULL,
    state TEXT NOT NULL,
    ce_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    observed_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_event ON events (event_id);
CREATE TABLE IF NOT EXISTS sinks (
    name TEXT PRIMARY KEY,
    cursor INTEGER NOT NULL DEFAULT 0,
    parked TEXT,
    parked_at REAL,
    last_error TEXT,
    last_error_at REAL,
    last_ok_at REAL,
    delivered INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS dead_letters (
    sink TEXT NOT NULL,
    seq INTEGER NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (sink, seq)
);
""" + approval_messages.SCHEMA + hook_runs.SCHEMA + recoveries.SCHEMA


@dataclass(frozen=True)
class SinkStatus:
    name: str
    backlog: int
    oldest_observed_at: float | None
    parked: str | None
    parked_at: float | None
    last_error: str | None
    last_error_at: float | None
    last_ok_at: float | None
    delivered: int
    dead_letters: int


def db_path(state_dir: Path) -> Path:
    return Path(state_dir) / DB_NAME


class Outbox:
    """One connection to the outbox database; not shared between threads."""

    def __init__(self, state_dir: Path, *, create: bool = True, readonly: bool = False) -> None:
        self.path = db_path(state_dir)
        if readonly:
            if not self.path.exists():
                raise StateError(f"no state database at {self.path} (has the agent run here?)")
            uri = f"file:{self.path}?mode=ro"
            self._db = self._connect(uri, uri=True)
            self._tables()
            return
        try:
            Path(state_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"state directory {state_dir} cannot be created: {exc.strerror}") from exc
        if not create and not self.path.exists():
            raise StateError(f"no state database at {self.path}")
        if not os.access(state_dir, os.W_OK):  # also catches a read-only file system, even for root
            raise StateError(
                f"state directory {state_dir} is read-only or not writable; "
                "give the agent a writable --state-dir (state.dir)"
            )
        self._db = self._connect(str(self.path))
        try:
            housekeeping.prepare(self._db, str(self.path))
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            with self._db:
                self._db.executescript(_SCHEMA)
                self._db.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise state_error(self.path, exc) from exc
        self._tables()

    def _tables(self) -> None:
        self._data_version: int | None = None  # changed_elsewhere's last reading
        self.approval_messages = ApprovalMessages(self._db)
        self.hook_runs = HookRuns(self._db)
        self.recoveries = recoveries.Recoveries(self._db)

    def _connect(self, target: str, uri: bool = False) -> sqlite3.Connection:
        try:
            # Each Outbox is used by one thread at a time, but may be opened by another (the agent
            # is built on the main thread and run on a worker in `demo`).
            db = sqlite3.connect(
                target, timeout=10.0, isolation_level=None, uri=uri, check_same_thread=False
            )
            db.execute("PRAGMA busy_timeout=10000")
            row = db.execute("PRAGMA quick_check").fetchone()
        except sqlite3.DatabaseError as exc:
            raise state_error(self.path, exc) from exc
        if row is None or row[0] != "ok":
            db.close()
            raise StateError(
                f"state database {self.path} is corrupt ({row[0] if row else 'unreadable'}); "
                "stop the agent and move the file aside to start afresh"
            )
        return db

    def close(self) -> None:
        self._db.close()

    def changed_elsewhere(self) -> bool:
        """Whether another connection committed since the last call (the first call says so)."""
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        changed, self._data_version = version != self._data_version, version
        return changed

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata ---------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, items: dict[str, Any]) -> None:
        try:
            with self._tx():
                self._db.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in items.items()],
                )
        except sqlite3.OperationalError as exc:
            raise state_error(self.path, exc) from exc

    def previous_document(self) -> Document | None:
        raw = self.get_meta("document")
        if raw is None:
            return None
        try:
            return parse_document(raw)
        except MalformedDocument as exc:
            raise StateError(f"the document stored in {self.path} is unreadable: {exc}") from exc

    def mark_poll(self) -> None:
        """Note "polled again, same outcome" without a database write: the mark's mtime.

        Unchanged documents are the agent's most frequent event by far; a commit (and its fsync)
        for each would be its largest idle cost. ``last_poll`` reads the mark with the meta table.
        """
        mark = self.path.parent / POLL_MARK
        try:
            os.utime(mark)
        except FileNotFoundError:
            with contextlib.suppress(OSError):  # status then shows the last recorded poll
                mark.touch()
        except OSError:
            pass  # as above: an older time, never a wrong one

    def last_poll(self) -> tuple[float | None, float | None]:
        """(last poll, last successful poll) as unix times, from the meta table and the mark."""
        at = _as_float(self.get_meta("last_poll_at"))
        ok_at = _as_float(self.get_meta("last_ok_poll_at"))
        try:
            marked = (self.path.parent / POLL_MARK).stat().st_mtime
        except OSError:
            marked = None
        if at is not None and marked is not None and marked > at:
            at = marked
            if self.get_meta("last_poll_ok") == "1":
                ok_at = marked
        return at, ok_at

    # -- writing events ---------------------------------------------------------------------
    def record(self, document: Document | None, events: Iterable[NewEvent]) -> list[StoredEvent]:
        """Store ``document`` as the last one seen and the events not seen before, atomically."""
        inserted: list[StoredEvent] = []
        try:
            with self._tx():
                for ev in events:
                    cur = self._db.execute(
                        "INSERT OR IGNORE INTO events "
                        "(ce_id, event_id, state, ce_type, payload, observed_at) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (ev.ce_id, ev.event_id, ev.state, ev.ce_type, ev.payload, ev.observed_at),
                    )
                    if cur.rowcount == 1:
                        inserted.append(
                            StoredEvent(
                                cur.lastrowid or 0, ev.ce_id, ev.event_id, ev.state,
                                ev.ce_type, ev.payload, ev.observed_at,
                            )
                        )
                if document is not None:
                    self._db.execute(
                        "INSERT INTO meta (key, value) VALUES ('document', ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (json.dumps(document.to_wire()),),
                    )
        except sqlite3.OperationalError as exc:
            raise state_error(self.path, exc) from exc
        return inserted

    def has_event(self, ce_id: str) -> bool:
        row = self._db.execute("SELECT 1 FROM events WHERE ce_id = ?", (ce_id,)).fetchone()
        return row is not None

    def events_for(self, event_id: str) -> list[StoredEvent]:
        rows = self._db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE event_id = ? ORDER BY seq", (event_id,)
        ).fetchall()
        return [StoredEvent(*r) for r in rows]

    def seen_in_states(self, event_ids: Sequence[str], states: Sequence[str]) -> bool:
        """Whether an event with one of ``event_ids`` was recorded in one of ``states``."""
        if not event_ids or not states:
            return False
        ids, marks = ",".join("?" for _ in event_ids), ",".join("?" for _ in states)
        row = self._db.execute(
            f"SELECT 1 FROM events WHERE event_id IN ({ids}) AND state IN ({marks}) LIMIT 1",
            (*event_ids, *states),
        ).fetchone()
        return row is not None

    def latest_of_types(self, ce_types: Sequence[str], limit: int) -> list[StoredEvent]:
        """The last ``limit`` events of the given CloudEvent types, newest first."""
        if not ce_types:
            return []
        marks = ",".join("?" for _ in ce_types)
        rows = self._db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE ce_type IN ({marks}) ORDER BY seq DESC LIMIT ?",
            (*ce_types, limit),
        ).fetchall()
        return [StoredEvent(*r) for r in rows]

    def all_events(self, after: int = 0, limit: int = 1_000_000) -> list[StoredEvent]:
        rows = self._db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, limit),
        ).fetchall()
        return [StoredEvent(*r) for r in rows]

    # -- sinks ------------------------------------------------------------------------------
    def register_sinks(self, names: Sequence[str]) -> None:
        """A sink seen for the first time starts at the beginning of the retained events."""
        with self._tx():
            self._db.executemany(
                "INSERT OR IGNORE INTO sinks (name, cursor) VALUES (?, 0)", [(n,) for n in names]
            )

    def pending(self, sink: str, limit: int) -> list[StoredEvent]:
        rows = self._db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events "
            "WHERE seq > (SELECT cursor FROM sinks WHERE name = ?) ORDER BY seq LIMIT ?",
            (sink, limit),
        ).fetchall()
        return [StoredEvent(*r) for r in rows]

    def ack(self, sink: str, done: Sequence[tuple[int, str | None]]) -> None:
        """Advance ``sink``'s cursor past ``done`` (seq, dead-letter reason or None), in order."""
        if not done:
            return
        now = time.time()
        dead = [(sink, seq, reason, now) for seq, reason in done if reason is not None]
        delivered = len(done) - len(dead)
        with self._tx():
            if dead:
                self._db.executemany(
                    "INSERT OR REPLACE INTO dead_letters (sink, seq, reason, at) VALUES (?, ?, ?, ?)",
                    dead,
                )
            self._db.execute(
                "UPDATE sinks SET cursor = MAX(cursor, ?), delivered = delivered + ?, "
                "last_ok_at = CASE WHEN ? > 0 THEN ? ELSE last_ok_at END WHERE name = ?",
                (done[-1][0], delivered, delivered, now, sink),
            )

    def note_error(self, sink: str, error: str | None) -> None:
        with self._tx():
            self._db.execute(
                "UPDATE sinks SET last_error = ?, last_error_at = ? WHERE name = ?",
                (error, time.time() if error else None, sink),
            )

    def park(self, sink: str, reason: str) -> None:
        with self._tx():
            self._db.execute(
                "UPDATE sinks SET parked = ?, parked_at = ?, last_error = ?, last_error_at = ? "
                "WHERE name = ?",
                (reason, time.time(), reason, time.time(), sink),
            )

    def resume(self, sink: str) -> bool:
        """Unpark ``sink``; False when no such sink is known."""
        with self._tx():
            cur = self._db.execute(
                "UPDATE sinks SET parked = NULL, parked_at = NULL WHERE name = ?", (sink,)
            )
        return cur.rowcount == 1

    def parked(self, sink: str) -> str | None:
        row = self._db.execute("SELECT parked FROM sinks WHERE name = ?", (sink,)).fetchone()
        return None if row is None else row[0]

    def sink_names(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT name FROM sinks ORDER BY name")]

    def sink_status(self, sink: str) -> SinkStatus:
        row = self._db.execute(
            "SELECT cursor, parked, parked_at, last_error, last_error_at, last_ok_at, delivered "
            "FROM sinks WHERE name = ?", (sink,)).fetchone()
        if row is None:
            raise KeyError(sink)
        cursor = row[0]
        count, oldest = self._db.execute(
            "SELECT COUNT(*), MIN(observed_at) FROM events WHERE seq > ?", (cursor,)).fetchone()
        dead = self._db.execute("SELECT COUNT(*) FROM dead_letters WHERE sink = ?", (sink,)).fetchone()[0]
        return SinkStatus(sink, count, oldest, row[1], row[2], row[3], row[4], row[5], row[6], dead)

    def dead_letters(self, sink: str) -> list[tuple[int, str, float]]:
        sql = "SELECT seq, reason, at FROM dead_letters WHERE sink = ? ORDER BY seq"
        return list(self._db.execute(sql, (sink,)))

    def prune(self, active_sinks: Sequence[str], older_than: float) -> int:
        """Drop events every active sink has passed and that were observed before ``older_than``."""
        return self.housekeep(active_sinks, older_than).events

    def housekeep(self, active_sinks: Sequence[str], older_than: float,
                  now: float | None = None) -> housekeeping.Pruned:
        """Prune delivered events, dead letters and finished hook runs older than ``older_than``
        and expired approval-message ids, then reclaim the space (``housekeeping.py``)."""
        try:
            return housekeeping.run(self._db, active_sinks, older_than, now)
        except sqlite3.DatabaseError as exc:
            raise state_error(self.path, exc) from exc

    # -- internals --------------------------------------------------------------------------
    def _tx(self) -> Transaction:
        return Transaction(self._db)


_EVENT_COLUMNS = "seq, ce_id, event_id, state, ce_type, payload, observed_at"


def _as_float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
