"""The outbox: atomic record, dedup by CloudEvent id, per-sink cursors, dead letters, parking."""

import sqlite3

import pytest

from se_forwarder.errors import StateError
from se_forwarder.model import Document
from se_forwarder.outbox import NewEvent, Outbox


def new(event_id: str, state: str) -> NewEvent:
    return NewEvent(f"{event_id}/{state}", event_id, state, f"t.{state}", '{"id": "x"}', 1.0)


@pytest.fixture
def box(tmp_path):
    with Outbox(tmp_path) as b:
        b.register_sinks(["a", "b"])
        yield b


def test_the_same_transition_is_recorded_once(box):
    assert len(box.record(Document(1), [new("E", "scheduled")])) == 1
    assert box.record(Document(2), [new("E", "scheduled")]) == []
    assert [e.ce_id for e in box.all_events()] == ["E/scheduled"]


def test_the_document_is_stored_with_its_events(box):
    box.record(Document(7), [new("E", "scheduled")])
    assert box.previous_document().incarnation == 7


def test_a_failed_transaction_stores_neither_document_nor_events(box):
    box.record(Document(1), [])

    def events():
        yield new("E", "scheduled")
        raise RuntimeError("crash in the middle of the transaction")

    with pytest.raises(RuntimeError):
        box.record(Document(2), events())
    assert box.previous_document().incarnation == 1
    assert box.all_events() == []


def test_each_sink_has_its_own_cursor(box):
    box.record(Document(1), [new("E", "scheduled"), new("E", "started")])
    first = box.pending("a", 10)
    box.ack("a", [(first[0].seq, None)])
    assert [e.state for e in box.pending("a", 10)] == ["started"]
    assert [e.state for e in box.pending("b", 10)] == ["scheduled", "started"]


def test_dead_letter_is_kept_with_its_reason_and_the_cursor_moves_on(box):
    box.record(Document(1), [new("E", "scheduled"), new("E", "started")])
    events = box.pending("a", 10)
    box.ack("a", [(events[0].seq, "400 Bad Request"), (events[1].seq, None)])
    assert box.pending("a", 10) == []
    assert box.dead_letters("a")[0][1] == "400 Bad Request"
    assert box.sink_status("a").dead_letters == 1


def test_parking_keeps_the_backlog_until_resumed(box):
    box.record(Document(1), [new("E", "scheduled")])
    box.park("a", "410 Gone")
    assert box.parked("a") == "410 Gone"
    assert box.sink_status("a").backlog == 1
    assert box.resume("a") is True
    assert box.parked("a") is None


def test_a_new_sink_receives_everything_retained(box):
    box.record(Document(1), [new("E", "scheduled")])
    box.register_sinks(["late"])
    assert len(box.pending("late", 10)) == 1


def test_a_corrupt_database_is_one_clear_error(tmp_path):
    (tmp_path / "outbox.sqlite3").write_bytes(b"this is not sqlite" * 1000)
    with pytest.raises(StateError, match="corrupt|not a database"):
        Outbox(tmp_path)


def test_a_truncated_database_is_one_clear_error(tmp_path):
    with Outbox(tmp_path) as b:
        b.register_sinks(["a"])
        b.record(Document(1), [new(f"E{i}", "scheduled") for i in range(500)])
    path = tmp_path / "outbox.sqlite3"
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"outbox.sqlite3{suffix}").unlink(missing_ok=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StateError):
        Outbox(tmp_path)


def test_status_can_read_while_another_connection_writes(tmp_path):
    with Outbox(tmp_path) as writer:
        writer.register_sinks(["a"])
        writer.record(Document(1), [new("E", "scheduled")])
        with Outbox(tmp_path, readonly=True) as reader:
            assert reader.sink_status("a").backlog == 1


def test_database_uses_wal(tmp_path):
    Outbox(tmp_path).close()
    mode = sqlite3.connect(tmp_path / "outbox.sqlite3").execute("PRAGMA journal_mode").fetchone()
    assert mode[0] == "wal"
