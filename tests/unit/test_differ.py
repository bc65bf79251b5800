"""Document-to-transitions: each (EventId, state) derived from a document sequence, once."""

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.differ import diff
from se_forwarder.model import Document, ScheduledEvent


def ev(event_id: str, status: str) -> ScheduledEvent:
    return ScheduledEvent(event_id=event_id, event_type="Reboot", status=status,
                          resources=("vm0",), not_before=None)


def doc(incarnation: int, *events: ScheduledEvent) -> Document:
    return Document(incarnation, tuple(events))


def states(transitions):
    return [(t.event_id, t.state) for t in transitions]


def test_new_scheduled_event_is_scheduled():
    assert states(diff(doc(1), doc(2, ev("a", "Scheduled")))) == [("a", "scheduled")]


def test_new_event_already_started_is_started_without_scheduled():
    assert states(diff(doc(1), doc(2, ev("a", "Started")))) == [("a", "started")]


def test_scheduled_to_started_is_started():
    assert states(diff(doc(2, ev("a", "Scheduled")), doc(3, ev("a", "Started")))) == [
        ("a", "started")]


def test_gone_after_started_is_completed():
    assert states(diff(doc(3, ev("a", "Started")), doc(4))) == [("a", "completed")]


def test_gone_while_scheduled_is_canceled():
    assert states(diff(doc(2, ev("a", "Scheduled")), doc(3))) == [("a", "canceled")]


def test_same_incarnation_is_no_work_even_if_content_differs():
    assert diff(doc(5, ev("a", "Scheduled")), doc(5)) == []


def test_lower_incarnation_is_diffed_normally():
    assert states(diff(doc(9, ev("a", "Scheduled")), doc(1))) == [("a", "canceled")]


def test_first_document_yields_its_events():
    assert states(diff(None, doc(7, ev("a", "Scheduled"), ev("b", "Started")))) == [
        ("a", "scheduled"), ("b", "started")]


def expected_from_sequence(documents: list[Document]) -> set[tuple[str, str]]:
    """The reference model: walk each event's status history through the sequence."""
    out: set[tuple[str, str]] = set()
    last: dict[str, str] = {}
    prev_inc = None
    for d in documents:
        if d.incarnation == prev_inc:
            continue
        prev_inc = d.incarnation
        now = {e.event_id: e.status for e in d.events}
        for event_id, status in now.items():
            if status == "Scheduled" and event_id not in last:
                out.add((event_id, "scheduled"))
            if status == "Started" and last.get(event_id) != "Started":
                out.add((event_id, "started"))
        for event_id, status in last.items():
            if event_id not in now:
                out.add((event_id, "completed" if status == "Started" else "canceled"))
        last = now
    return out


@st.composite
def document_sequences(draw):
    ids = ["A", "B", "C", "D"]
    n = draw(st.integers(1, 12))
    docs = []
    incarnation = 0
    for _ in range(n):
        incarnation += draw(st.sampled_from([0, 1, 1, 1, 2]))
        chosen = draw(st.lists(st.sampled_from(ids), unique=True, max_size=4))
        docs.append(doc(incarnation, *(ev(i, draw(st.sampled_from(["Scheduled", "Started"])))
                                       for i in chosen)))
    return docs


@settings(max_examples=300)
@given(document_sequences())
def test_emitted_set_equals_the_set_derived_from_the_sequence_each_exactly_once(documents):
    # The agent's dedup key is (EventId, state): what reaches the outbox is the first occurrence.
    emitted: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    previous = None
    for d in documents:
        for key in states(diff(previous, d)):
            if key not in seen:
                seen.add(key)
                emitted.append(key)
        if previous is None or d.incarnation != previous.incarnation:
            previous = d
    # Events that reappear under the same id (not something Azure does) are deduplicated too.
    assert len(emitted) == len(set(emitted))
    assert set(emitted) == expected_from_sequence(documents)
