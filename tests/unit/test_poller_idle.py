"""An unchanged document costs the poller no database write; a change is still recorded with its
CloudEvents in one transaction. Real simulator (without ETag, as IMDS is documented), real outbox."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from se_forwarder import poller as poller_mod
from se_forwarder.config import from_dict
from se_forwarder.imds import ImdsClient
from se_forwarder.model import VmIdentity
from se_forwarder.outbox import Outbox, db_path
from se_forwarder.poller import Poller
from se_forwarder.simulator import SimulatorServer
from se_forwarder.status import read_status


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[SimulatorServer, Poller, Outbox]]:
    with SimulatorServer(etag=False, throttle_rps=None) as sim:
        imds = ImdsClient(sim.url)
        outbox = Outbox(tmp_path)
        poller = Poller(
            from_dict({"imds": {"url": sim.url}, "state": {"dir": str(tmp_path)}}), imds, outbox,
            lambda: VmIdentity.from_hostname("vm0"),
            offer=lambda _doc, _t: None, on_recorded=lambda: None,
            stop=threading.Event(),
        )
        imds.limiter.limit = 10**6
        try:
            yield sim, poller, outbox
        finally:
            imds.close()
            outbox.close()


def test_unchanged_documents_write_nothing_to_the_database(setup, tmp_path):
    sim, poller, outbox = setup
    sim.sim.add_event({"EventType": "Freeze"})
    poller.poll_or_raise()
    poller.poll_or_raise()
    watcher = sqlite3.connect(db_path(tmp_path))  # its data_version moves on any other connection's commit
    before = watcher.execute("PRAGMA data_version").fetchone()[0]
    for _ in range(50):
        poller.poll_or_raise()
    assert watcher.execute("PRAGMA data_version").fetchone()[0] == before
    watcher.close()


def test_a_change_after_unchanged_polls_is_recorded_with_its_document(setup):
    sim, poller, outbox = setup
    poller.poll_or_raise()
    for _ in range(10):
        poller.poll_or_raise()
    event_id = sim.sim.add_event({"EventType": "Reboot"})["EventId"]
    poller.poll_or_raise()
    stored = outbox.previous_document()
    assert stored is not None and event_id in stored.by_id()
    assert [e.state for e in outbox.events_for(event_id)] == ["scheduled"]


def test_status_sees_unchanged_polls_through_the_poll_mark(setup, tmp_path, monkeypatch):
    _, poller, _ = setup
    poller.poll_or_raise()
    first = read_status(tmp_path)["last_poll"]["at"]
    monkeypatch.setattr(poller_mod, "POLL_STATUS_EVERY", 0.0)
    poller._last_status_write = 0.0  # the mark is due
    time.sleep(0.05)
    poller.poll_or_raise()
    last = read_status(tmp_path)["last_poll"]
    assert last["at"] > first and last["ok"] is True and last["last_ok_at"] == last["at"]


def test_the_poller_keeps_the_last_document_it_handed_on(setup):
    sim, poller, _ = setup
    assert poller.last() is None
    poller.poll_or_raise()
    first = poller.last()
    assert first is not None and first.events == ()
    event_id = sim.sim.add_event({"EventType": "Reboot"})["EventId"]
    poller.poll_or_raise()
    last = poller.last()
    assert last is not None and event_id in last.by_id() and last.incarnation > first.incarnation
