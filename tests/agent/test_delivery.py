"""The delivery worker against the real SQLite outbox, on its own thread."""

from __future__ import annotations

import sqlite3
import threading
import time

from se_forwarder.delivery import DeliveryWorker
from se_forwarder.outbox import NewEvent, Outbox, db_path
from se_forwarder.sinks.base import DeadLetter, Delivered, DeliveryReport, Retry, StoredEvent
from tests.support.waiting import wait_for


class LockingSink:
    """Delivers everything; on its first call another writer takes the database's write lock and
    keeps it longer than the worker waits for it, as a long transaction or a full disk would."""

    name = "locking"
    max_batch = 10

    def __init__(self, worker_box: list, state_dir) -> None:
        self.worker_box = worker_box
        self.state_dir = state_dir
        self.calls = 0
        self.blocker: sqlite3.Connection | None = None

    def deliver(self, batch):
        self.calls += 1
        if self.calls == 1:
            # The worker's own connection (this thread): give up on a lock after 0.1 s, not 10 s.
            self.worker_box[0]._outbox._db.execute("PRAGMA busy_timeout=100")
            self.blocker = sqlite3.connect(db_path(self.state_dir), isolation_level=None,
                                           check_same_thread=False)
            self.blocker.execute("BEGIN IMMEDIATE")
            threading.Timer(1.0, self.blocker.execute, ("COMMIT",)).start()
        return DeliveryReport([Delivered() for _ in batch])

    def check(self):
        return None

    def close(self):
        pass


def test_worker_survives_a_locked_database_and_delivers_the_batch_later(tmp_path):
    with Outbox(tmp_path) as box:
        box.register_sinks(["locking"])
        box.record(None, [NewEvent("E1/scheduled", "E1", "scheduled", "t", "{}", time.time())])
    stop = threading.Event()
    holder: list = []
    sink = LockingSink(holder, tmp_path)
    worker = DeliveryWorker(sink, tmp_path, stop)
    holder.append(worker)
    worker.start()
    try:
        def delivered():
            with Outbox(tmp_path, readonly=True) as box:
                return box.sink_status("locking").backlog == 0
        wait_for(delivered, timeout=15, what="the cursor to move once the lock is gone")
        assert sink.calls >= 2  # the failed acknowledgement made it offer the batch again
    finally:
        stop.set()
        worker.wakeup.set()
        worker.join(5)
        if sink.blocker is not None:
            sink.blocker.close()


class ScriptedSink:
    """Answers each call with the next scripted outcome for its first event (then Delivered),
    and records the ids it was handed, call by call."""

    name = "scripted"
    max_batch = 10

    def __init__(self, *script) -> None:
        self.script = list(script)
        self.calls: list[list[str]] = []

    def deliver(self, batch):
        self.calls.append([e.ce_id for e in batch])
        first = self.script.pop(0) if self.script else Delivered()
        return DeliveryReport([first] if not isinstance(first, Delivered) else
                              [Delivered() for _ in batch])

    def check(self):
        return None

    def close(self):
        pass


def _identity_event(ident: str) -> StoredEvent:
    return StoredEvent(seq=0, ce_id=ident, event_id="", state="identity",
                       ce_type="com.azure.scheduledevents.identity", payload="{}",
                       observed_at=time.time())


def _backlog(state_dir, sink: str) -> None:
    with Outbox(state_dir) as box:
        box.register_sinks([sink])
        box.record(None, [NewEvent("E1/scheduled", "E1", "scheduled", "t", "{}", time.time())])


def test_an_announcement_goes_before_the_backlog_and_is_retried_until_the_sink_takes_it(tmp_path):
    _backlog(tmp_path, "scripted")
    sink = ScriptedSink(Retry("hub down"))
    current = [_identity_event("identity/vm/key/1")]
    worker = DeliveryWorker(sink, tmp_path, threading.Event(), announcement=lambda: current[0])
    with Outbox(tmp_path) as box:
        assert worker.deliver_once(box) > 0, "the backlog waits behind the announcement"
        assert sink.calls == [["identity/vm/key/1"]]
        while worker.deliver_once(box) is not None:
            pass
        assert sink.calls[1:] == [["identity/vm/key/1"], ["E1/scheduled"]]
        current[0] = _identity_event("identity/vm/key/2")
        worker.deliver_once(box)
        assert sink.calls[3:] == [["identity/vm/key/2"]], "a new one is announced, once"


def test_an_announcement_refused_for_good_does_not_hold_the_backlog(tmp_path):
    _backlog(tmp_path, "scripted")
    sink = ScriptedSink(DeadLetter("too large"))
    worker = DeliveryWorker(sink, tmp_path, threading.Event(),
                            announcement=lambda: _identity_event("identity/vm/key/1"))
    with Outbox(tmp_path) as box:
        while worker.deliver_once(box) is not None:
            pass
        assert sink.calls == [["identity/vm/key/1"], ["E1/scheduled"]]
        assert box.sink_status("scripted").backlog == 0


class CollectingSink:
    """Delivers everything and keeps the ids it was handed."""

    name = "collecting"
    max_batch = 10

    def __init__(self) -> None:
        self.ids: list[str] = []

    def deliver(self, batch):
        self.ids += [e.ce_id for e in batch]
        return DeliveryReport([Delivered() for _ in batch])

    def check(self):
        return None

    def close(self):
        pass


def _record(state_dir, ident: str) -> None:
    """A row recorded through a connection of its own, as another thread or process does."""
    with Outbox(state_dir) as box:
        box.record(None, [NewEvent(f"{ident}/scheduled", ident, "scheduled", "t", "{}", time.time())])


def test_an_idle_worker_sleeps_until_woken_and_then_delivers_what_the_outbox_gained(tmp_path):
    with Outbox(tmp_path) as box:
        box.register_sinks(["collecting"])
    _record(tmp_path, "E1")
    stop = threading.Event()
    sink = CollectingSink()
    worker = DeliveryWorker(sink, tmp_path, stop)
    worker.start()
    try:
        wait_for(lambda: sink.ids == ["E1/scheduled"], timeout=10, what="the first row")
        _record(tmp_path, "E2")
        time.sleep(2.5)  # the worker used to look every second; now nothing but a wake-up does
        assert sink.ids == ["E1/scheduled"], "an idle worker does not poll the outbox"
        worker.wakeup.set()  # what the agent does when it records, or its poller sees a change
        wait_for(lambda: sink.ids == ["E1/scheduled", "E2/scheduled"], timeout=10,
                 what="the row recorded while it slept")
    finally:
        stop.set()
        worker.wakeup.set()
        worker.join(5)
