"""The delivery worker against the real SQLite outbox, on its own thread."""

from __future__ import annotations

import sqlite3
import threading
import time

from se_forwarder.delivery import DeliveryWorker
from se_forwarder.outbox import NewEvent, Outbox, db_path
from se_forwarder.sinks.base import Delivered, DeliveryReport
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
