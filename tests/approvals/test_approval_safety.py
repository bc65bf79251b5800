"""Edge cases of the approval path found in review: each one must never approve wrongly, and a
valid approval must not be lost to a detail (the case of a GUID, a VM name, a transient error).

The approver runs in-process here, against the simulator over real HTTP and a real state database.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from se_forwarder import config
from se_forwarder.approvals import signing
from se_forwarder.approvals.approver import Approver
from se_forwarder.approvals.messages import APPROVE, REJECT, validate
from se_forwarder.approvals.settings import ApprovalsSettings
from se_forwarder.imds import ImdsClient
from se_forwarder.model import VmIdentity, parse_document
from se_forwarder.outbox import Outbox, db_path
from se_forwarder.outbox.hook_runs import SCHEMA
from tests.support.waiting import wait_for

KEY = signing.generate_private_key()
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SCHEDULED_ID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"
DOCUMENT = parse_document({
    "DocumentIncarnation": 3,
    "Events": [{"EventId": SCHEDULED_ID, "EventType": "Freeze", "ResourceType": "VirtualMachine",
                "Resources": ["vm0"], "EventStatus": "Scheduled",
                "NotBefore": "Sun, 01 Mar 2026 12:10:00 GMT", "EventSource": "Platform",
                "DurationInSeconds": 5}],
})
VM = VmIdentity(vm_id="00000000-0000-0000-0000-000000000000", name="vm0")


def verdict(event_id: str = SCHEDULED_ID, *, vm_name: str | None = "vm0", **data: str):
    message = signing.new_message(event_id, source="urn:coordinator", key=KEY,
                                  expires_at=NOW + timedelta(minutes=10), vm_name=vm_name,
                                  now=NOW - timedelta(seconds=1), message_id="m-1")
    if data:
        message["data"].update(data)
        message = signing.sign(message, KEY)
    return validate(signing.encode(message), keys=[KEY.public_key()], now=NOW, document=DOCUMENT,
                    vm_name="vm0", seen_before=lambda mid: False, event_was_seen=lambda eid: False)


# -- the validator ------------------------------------------------------------------------------


def test_a_lower_case_event_id_approves_the_event_as_imds_spells_it():
    result = verdict(SCHEDULED_ID.lower())
    assert result.outcome == APPROVE
    assert result.event_id == SCHEDULED_ID  # what is POSTed and recorded


def test_an_event_id_with_a_trailing_newline_is_malformed():
    result = verdict(SCHEDULED_ID + "\n")
    assert (result.outcome, result.code) == (REJECT, "malformed")


def test_an_expiry_out_of_range_in_utc_is_refused_not_raised():
    result = verdict(ExpiresAt="0001-01-01T00:00:00+01:00")
    assert (result.outcome, result.code) == (REJECT, "malformed")
    assert "out of range" in result.detail


def test_the_vm_name_in_a_message_matches_case_insensitively():
    assert verdict(vm_name="VM0").outcome == APPROVE
    assert verdict(vm_name="vm1").code == "wrong-vm"


# -- the approver, in-process ---------------------------------------------------------------------


def _approver(simulator, state, vm: VmIdentity = VM, **settings) -> Approver:
    imds = ImdsClient(simulator.url, timeout=5, first_call_timeout=5)
    return Approver(imds, state, vm, config.from_dict({"approvals": settings}).approvals)


@pytest.mark.parametrize("change", ["started", "canceled"])
def test_an_event_that_changed_after_the_document_was_read_is_never_posted(simulator, control,
                                                                           tmp_path, change):
    event_id = control.add(EventType="Reboot")["EventId"]
    stale = ImdsClient(simulator.url, timeout=5, first_call_timeout=5).get_document()
    assert stale.by_id()[event_id].status == "Scheduled"
    if change == "started":
        control.patch(event_id, EventStatus="Started")
    else:
        control.delete(event_id)
    approver = _approver(simulator, tmp_path)
    with Outbox(tmp_path) as box:
        result = approver.try_approve(box, event_id, "coordinator:test", document=stale)
        assert result == "not-scheduled"
        assert box.events_for(event_id) == []
    assert control.approvals() == []


def test_leader_only_compares_the_vm_name_case_insensitively(simulator, control, tmp_path):
    event_id = control.add(EventType="Reboot", EventSource="User", Resources=["VM0", "vm1"])["EventId"]
    approver = _approver(simulator, tmp_path, leader_only=True)
    approver.offer(ImdsClient(simulator.url, timeout=5, first_call_timeout=5).get_document())
    with Outbox(tmp_path) as box:
        approver.consider(box)
    assert [a["EventId"] for a in control.approvals()] == [event_id]


def test_the_approver_thread_survives_a_database_error(simulator, control, tmp_path, caplog):
    approver = _approver(simulator, tmp_path, hooks={"recover": ["true"]})
    imds = ImdsClient(simulator.url, timeout=5, first_call_timeout=5)
    approver.offer(imds.get_document())
    stop = threading.Event()
    approver.start(stop)
    try:
        wait_for(lambda: not approver._changed.is_set(), what="the approver's first step")
        db = sqlite3.connect(db_path(tmp_path), timeout=10)
        db.execute("DROP TABLE approval_hook_runs")  # every step now fails
        db.commit()
        approver.offer(imds.get_document())
        wait_for(lambda: any(r.levelno >= logging.ERROR and r.name == "se_forwarder.approvals"
                             for r in caplog.records), what="a failing step")
        db.executescript(SCHEMA)  # the trouble is over
        db.close()
        event_id = control.add(EventType="Reboot", EventSource="User")["EventId"]  # sample: approve
        approver.offer(imds.get_document())
        wait_for(lambda: [a for a in control.approvals() if a["EventId"] == event_id],
                 timeout=10, what="an approval after the error")
    finally:
        stop.set()
        approver.join(10)


def test_a_thread_that_fails_unexpectedly_is_restarted(tmp_path, simulator):
    approver = _approver(simulator, tmp_path)
    stop = threading.Event()
    calls: list[int] = []

    def flaky(stop_event: threading.Event) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("database is locked")

    approver._guard(flaky, stop)
    assert len(calls) == 2


def test_the_approval_lock_is_free_while_the_fresh_document_is_read(simulator, control, tmp_path):
    """The document read right before a POST may be slow (up to the IMDS timeout); it runs outside
    the approval lock, which is held only around the POST, so other approvals never wait on it."""
    event_id = control.add(EventType="Reboot")["EventId"]
    imds = ImdsClient(simulator.url, timeout=5, first_call_timeout=5)
    approver = Approver(lambda: ImdsClient(simulator.url, timeout=5, first_call_timeout=5),
                        tmp_path, VM, ApprovalsSettings())
    stale = imds.get_document()
    control.faults(delay_seconds=1.5, method="GET", count=1)
    results: list[str] = []
    with Outbox(tmp_path) as box:
        worker = threading.Thread(
            target=lambda: results.append(approver.try_approve(box, event_id, "cli", document=stale)))
        worker.start()
        try:
            time.sleep(0.5)  # the worker is inside its slow read now
            assert worker.is_alive()
            assert approver._approve_lock.acquire(timeout=0.2), "the read held the approval lock"
            approver._approve_lock.release()
        finally:
            worker.join(10)
    assert results == ["approved"]
    assert [a["EventId"] for a in control.approvals()] == [event_id]
    approver.close()
    imds.close()
