"""The fold's inbox (inbox.py): bounded in memory (``put`` waits for room, then says Full) and in
time (a turn hands out chunks until its time or event budget is spent, and the next turn goes on
where it stopped, each partition's order kept)."""

from __future__ import annotations

import queue
import threading

import pytest

from se_forwarder.fleet.coordinator.input import Batch, Inbox, Position
from se_forwarder.fleet.coordinator.input import inbox as inbox_module
from se_forwarder.fleet.coordinator.input.inbox import CHUNK


def batch(partition: str, first: int, count: int) -> Batch:
    events = [({"id": f"{partition}{n}"}, Position(n, str(n))) for n in range(first, first + count)]
    return Batch(partition, events, 0.0)


def ids(chunks) -> list[str]:
    return [event["id"] for chunk in chunks for event, _ in chunk.events]


def test_a_turn_hands_out_every_event_in_chunks_in_order():
    box = Inbox()
    box.put(batch("a", 0, CHUNK * 2 + 7))
    box.put(batch("b", 0, 3))
    chunks = list(box.turn(0))
    assert [len(c.events) for c in chunks] == [CHUNK, CHUNK, 7, 3]
    assert ids(chunks) == [f"a{n}" for n in range(CHUNK * 2 + 7)] + ["b0", "b1", "b2"]
    assert [c.partition for c in chunks] == ["a", "a", "a", "b"]
    assert box.waiting() == 0 and list(box.turn(0)) == []


def test_a_turn_whose_time_is_spent_stops_and_the_next_goes_on_where_it_stopped(monkeypatch):
    monkeypatch.setattr(inbox_module, "TURN_SECONDS", 0.0)  # every turn is spent after one chunk
    box = Inbox()
    box.put(batch("a", 0, CHUNK + 1))
    box.put(batch("a", CHUNK + 1, 1))
    turns = [ids(box.turn(0)) for _ in range(4)]
    assert turns == [[f"a{n}" for n in range(CHUNK)], [f"a{CHUNK}"], [f"a{CHUNK + 1}"], []]


def test_a_turn_whose_event_budget_is_spent_stops(monkeypatch):
    monkeypatch.setattr(inbox_module, "TURN_EVENTS", CHUNK)
    box = Inbox()
    box.put(batch("a", 0, CHUNK * 3))
    assert len(ids(box.turn(0))) == CHUNK and box.waiting() == 1


def test_put_says_full_when_no_room_comes_and_goes_in_once_there_is(monkeypatch):
    monkeypatch.setattr(inbox_module, "PUT_WAIT", 0.05)
    box = Inbox(batches=1)
    box.put(batch("a", 0, 1))
    with pytest.raises(queue.Full):
        box.put(batch("a", 1, 1))
    monkeypatch.setattr(inbox_module, "PUT_WAIT", 10.0)
    putting = threading.Thread(target=box.put, args=(batch("a", 1, 1),))
    putting.start()
    taken = ids(box.turn(0))  # room is made: the waiting put goes in
    putting.join(10)
    assert not putting.is_alive() and taken == ["a0"] and ids(box.turn(0)) == ["a1"]


def test_clear_forgets_what_waits_and_what_a_turn_left():
    box = Inbox()
    box.put(batch("a", 0, CHUNK + 5))
    box.put(batch("b", 0, 1))
    next(iter(box.turn(0)))  # the turn is left after its first chunk
    box.clear()
    assert box.waiting() == 0 and list(box.turn(0)) == []
