"""Document-to-transitions: each (EventId, state) derived from a document sequence, once."""

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.differ import diff
from se_forwarder.model import Document, ScheduledEvent

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=10)
EARLIER = NOW - timedelta(seconds=1)


def ev(event_id: str, status: str, not_before: datetime | None = None) -> ScheduledEvent:
    return ScheduledEvent(event_id=event_id, event_type="Reboot", status=status,
                          resources=("vm0",), not_before=not_before)


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


def test_gone_while_scheduled_after_our_approval_is_inferred_started_then_completed():
    out = diff(doc(2, ev("a", "Scheduled", LATER)), doc(3), approved={"a"}, now=NOW)
    assert states(out) == [("a", "started"), ("a", "completed")]
    assert [t.inferred_from for t in out] == ["approved", "approved"]
    assert all(t.event.status == "Scheduled" and t.incarnation == 3 for t in out)


def test_gone_while_scheduled_after_not_before_is_inferred_started_then_completed():
    out = diff(doc(2, ev("a", "Scheduled", EARLIER)), doc(3), now=NOW)
    assert states(out) == [("a", "started"), ("a", "completed")]
    assert [t.inferred_from for t in out] == ["not-before-passed"] * 2


def test_not_before_exactly_now_has_passed():
    out = diff(doc(2, ev("a", "Scheduled", NOW)), doc(3), now=NOW)
    assert [t.inferred_from for t in out] == ["not-before-passed"] * 2


def test_gone_before_not_before_and_never_approved_is_canceled():
    out = diff(doc(2, ev("a", "Scheduled", LATER)), doc(3), approved={"other"}, now=NOW)
    assert states(out) == [("a", "canceled")] and out[0].inferred_from is None


def test_approval_wins_over_not_before_as_the_reason():
    out = diff(doc(2, ev("a", "Scheduled", EARLIER)), doc(3), approved={"a"}, now=NOW)
    assert [t.inferred_from for t in out] == ["approved", "approved"]


def test_without_a_clock_only_the_approval_counts():
    assert states(diff(doc(2, ev("a", "Scheduled", EARLIER)), doc(3))) == [("a", "canceled")]


def test_gone_after_started_is_completed_and_never_marked_inferred():
    out = diff(doc(3, ev("a", "Started")), doc(4), approved={"a"}, now=NOW)
    assert states(out) == [("a", "completed")] and out[0].inferred_from is None


def test_vanished_while_the_agent_was_down_is_the_same_diff_from_the_stored_document():
    stored = doc(2, ev("a", "Scheduled", EARLIER), ev("b", "Scheduled", LATER))
    out = diff(stored, doc(9, ev("c", "Scheduled", LATER)), now=NOW)
    assert states(out) == [("c", "scheduled"), ("a", "started"), ("a", "completed"),
                           ("b", "canceled")]


def test_same_incarnation_is_no_work_even_if_content_differs():
    assert diff(doc(5, ev("a", "Scheduled")), doc(5)) == []


def test_lower_incarnation_is_diffed_normally():
    assert states(diff(doc(9, ev("a", "Scheduled")), doc(1))) == [("a", "canceled")]


def test_first_document_yields_its_events():
    assert states(diff(None, doc(7, ev("a", "Scheduled"), ev("b", "Started")))) == [
        ("a", "scheduled"), ("b", "started")]


def expected_from_sequence(documents: list[Document], approved: set[str] = frozenset(),
                           now: datetime | None = None) -> set[tuple[str, str]]:
    """The reference model: walk each event's status history through the sequence.

    A Scheduled event that vanished ran (started, completed) when this agent's approval was
    accepted or its NotBefore had passed, else it was canceled.
    """
    out: set[tuple[str, str]] = set()
    last: dict[str, ScheduledEvent] = {}
    prev_inc = None
    for d in documents:
        if d.incarnation == prev_inc:
            continue
        prev_inc = d.incarnation
        current = {e.event_id: e for e in d.events}
        for event_id, event in current.items():
            if event.status == "Scheduled" and event_id not in last:
                out.add((event_id, "scheduled"))
            if event.status == "Started" and (event_id not in last
                                              or last[event_id].status != "Started"):
                out.add((event_id, "started"))
        for event_id, event in last.items():
            if event_id in current:
                continue
            ran = event.status == "Started" or event_id in approved or (
                now is not None and event.not_before is not None and event.not_before <= now)
            if event.status != "Started" and ran:
                out.add((event_id, "started"))
            out.add((event_id, "completed" if ran else "canceled"))
        last = current
    return out


@st.composite
def document_sequences(draw):
    ids = ["A", "B", "C", "D"]
    n = draw(st.integers(1, 12))
    not_before = {i: draw(st.sampled_from([None, EARLIER, NOW, LATER])) for i in ids}
    docs = []
    incarnation = 0
    for _ in range(n):
        incarnation += draw(st.sampled_from([0, 1, 1, 1, 2]))
        chosen = draw(st.lists(st.sampled_from(ids), unique=True, max_size=4))
        docs.append(doc(incarnation, *(
            ev(i, status, not_before[i] if status == "Scheduled" else None)
            for i in chosen for status in [draw(st.sampled_from(["Scheduled", "Started"]))])))
    return docs


def emitted_through_the_outbox(documents, **facts) -> list[tuple[str, str]]:
    # The agent's dedup key is (EventId, state): what reaches the outbox is the first occurrence.
    emitted: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    previous = None
    for d in documents:
        for key in states(diff(previous, d, **facts)):
            if key not in seen:
                seen.add(key)
                emitted.append(key)
        if previous is None or d.incarnation != previous.incarnation:
            previous = d
    return emitted


@settings(max_examples=300)
@given(document_sequences())
def test_emitted_set_equals_the_set_derived_from_the_sequence_each_exactly_once(documents):
    emitted = emitted_through_the_outbox(documents)
    # Events that reappear under the same id (not something Azure does) are deduplicated too.
    assert len(emitted) == len(set(emitted))
    assert set(emitted) == expected_from_sequence(documents)


@settings(max_examples=300)
@given(document_sequences(), st.sets(st.sampled_from(["A", "B", "C", "D"])))
def test_with_approvals_and_a_clock_the_inference_rules_hold(documents, approved):
    emitted = emitted_through_the_outbox(documents, approved=approved, now=NOW)
    assert len(emitted) == len(set(emitted))
    assert set(emitted) == expected_from_sequence(documents, approved, NOW)


@settings(max_examples=300)
@given(document_sequences(), st.sets(st.sampled_from(["A", "B", "C", "D"])))
def test_an_event_is_never_both_canceled_and_completed_nor_started_after_completed(documents,
                                                                                   approved):
    transitions = []
    previous = None
    for d in documents:
        transitions += diff(previous, d, approved=approved, now=NOW)
        if previous is None or d.incarnation != previous.incarnation:
            previous = d
    # Within one disappearance: inferred pairs come started-then-completed, and never with canceled.
    for i, t in enumerate(transitions):
        if t.inferred_from is not None and t.state == "started":
            nxt = transitions[i + 1]
            assert (nxt.event_id, nxt.state, nxt.inferred_from) == (t.event_id, "completed",
                                                                     t.inferred_from)
        if t.state == "canceled":
            assert t.inferred_from is None
            assert t.event_id not in approved
            assert t.event.not_before is None or t.event.not_before > NOW
