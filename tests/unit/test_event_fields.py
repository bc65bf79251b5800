"""Lenient fields, strict documents: each row of ``event_fields.py``'s table, what the agent does
with a field it cannot read, and (hypothesis) that junk in one field of one event never changes
another event's transitions and changes its own only as documented."""

from __future__ import annotations

import copy
import email.utils
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from se_forwarder import cloudevents as ce
from se_forwarder.approvals.hooks import HookRunner
from se_forwarder.approvals.policy import SAMPLE_RULES, Policy, Rule
from se_forwarder.approvals.settings import HookSettings
from se_forwarder.differ import diff
from se_forwarder.event_fields import FIELDS, KNOWN_SOURCES, KNOWN_TYPES
from se_forwarder.model import MalformedDocument, ScheduledEvent, VmIdentity, parse_document

NOW = datetime(2026, 11, 25, 19, 0, tzinfo=UTC)
RFC_1123 = "Wed, 25 Nov 2026 19:05:25 GMT"
FULL = {
    "EventId": "A", "EventType": "Freeze", "ResourceType": "VirtualMachine", "Resources": ["vm0"],
    "EventStatus": "Scheduled", "NotBefore": RFC_1123, "Description": "Host maintenance.",
    "EventSource": "Platform", "DurationInSeconds": 5,
}
VM = VmIdentity(vm_id="id0", name="vm0")


def event(**fields: Any) -> ScheduledEvent:
    """The one event of a document whose event is FULL with ``fields`` changed (None: removed)."""
    raw = {k: v for k, v in {**FULL, **fields}.items() if v is not None}
    (parsed,) = parse_document({"DocumentIncarnation": 2, "Events": [raw]}).events
    return parsed


def problems(parsed: ScheduledEvent) -> list[str]:
    return [name for name, _ in parsed.problems]


# -- NotBefore -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "2026-11-25T19:05:25Z",  # Microsoft's mock server
    "2026-11-25T19:05:25+00:00",
    "2026-11-25T20:05:25+01:00",
    "2026-11-25T19:05:25.000Z",
    " Wed, 25 Nov 2026 19:05:25 GMT ",
])
def test_not_before_in_iso_8601_with_a_zone_is_the_same_moment_as_in_rfc_1123(text):
    parsed = event(NotBefore=text)
    assert parsed.not_before == event().not_before == datetime(2026, 11, 25, 19, 5, 25, tzinfo=UTC)
    assert parsed.problems == ()


@pytest.mark.parametrize("value", ["tomorrow", "2026-11-25T19:05:25", "2026-13-45T00:00:00Z", 1764097525,
                                   ["x"], "Fri, 31 Dec 9999 23:59:59 -2359"])
def test_a_not_before_that_cannot_be_read_keeps_the_event_and_is_carried_as_served(value):
    parsed = event(NotBefore=value)
    assert parsed.not_before is None and problems(parsed) == ["NotBefore"]
    data = ce.event_data(parsed, 2, VM)
    assert data["NotBefore"] == value and data["NotBeforeUtc"] is None


def test_an_empty_not_before_is_none_and_no_problem():
    assert event(NotBefore="").not_before is None and event(NotBefore="").problems == ()


def test_an_unknown_not_before_matches_no_notice_rule():
    rule = Rule("soon", "approve", {"max_notice": 10**9})
    assert rule.matches(event(), "vm0", NOW)
    assert not rule.matches(event(NotBefore="soon"), "vm0", NOW)


def test_an_unknown_not_before_is_prepared_at_once_whatever_the_lead():
    runner = HookRunner(HookSettings(prepare=("true",), prepare_lead=60.0), VM)
    assert not runner.prepare_due(event(), NOW)  # 325 s away, the lead is 60 s
    assert runner.prepare_due(event(NotBefore="soon"), NOW)


def test_a_vanished_event_whose_not_before_was_unreadable_counts_as_run():
    before = parse_document({"DocumentIncarnation": 2, "Events": [dict(FULL, NotBefore="soon")]})
    out = diff(before, parse_document({"DocumentIncarnation": 3, "Events": []}), now=NOW)
    assert [(t.state, t.inferred_from) for t in out] == [("started", "not-before-unknown"),
                                                         ("completed", "not-before-unknown")]
    approved = diff(before, parse_document({"DocumentIncarnation": 3, "Events": []}),
                    approved={"A"}, now=NOW)
    assert {t.inferred_from for t in approved} == {"approved"}


# -- EventStatus -------------------------------------------------------------------------------------

def test_event_status_is_read_whatever_its_case():
    assert event(EventStatus="STARTED").status == "Started"
    assert event(EventStatus="scheduled").status == "Scheduled"


@pytest.mark.parametrize("value", ["Completed", "InProgress", "Canceled"])
def test_an_unknown_event_status_counts_as_started_and_is_never_approved(value):
    parsed = event(EventStatus=value)
    assert parsed.status == "Started" and problems(parsed) == ["EventStatus"]
    assert parsed.raw["EventStatus"] == value
    assert Policy(SAMPLE_RULES).decide(parsed, "vm0", NOW).action == "wait"
    doc = parse_document({"DocumentIncarnation": 2, "Events": [dict(FULL, EventStatus=value)]})
    assert [t.state for t in diff(None, doc)] == ["started"]


def test_an_event_without_event_status_or_event_id_is_not_a_document():
    for raw in ({k: v for k, v in FULL.items() if k != "EventStatus"}, dict(FULL, EventStatus=3),
                {k: v for k, v in FULL.items() if k != "EventId"}, dict(FULL, EventId="")):
        with pytest.raises(MalformedDocument):
            parse_document({"DocumentIncarnation": 2, "Events": [raw]})


# -- EventType and EventSource -------------------------------------------------------------------

def test_an_unknown_event_type_is_kept_and_matches_no_type_rule():
    parsed = event(EventType="LiveMigration")
    assert parsed.event_type == "LiveMigration" and problems(parsed) == ["EventType"]
    assert not Rule("freezes", "approve", {"type": "Freeze"}).matches(parsed, "vm0", NOW)
    assert Policy(SAMPLE_RULES).decide(parsed, "vm0", NOW).action == "wait"


@pytest.mark.parametrize("value", [None, 5, ""])
def test_a_missing_event_type_is_empty(value):
    parsed = event(EventType=value)
    assert parsed.event_type == "" and "EventType" in problems(parsed)
    assert ce.about(ce.Kind.SCHEDULED, parsed, 2, VM, NOW).get_attributes()["eventtype"] == ""


def test_event_type_and_source_are_read_whatever_their_case():
    parsed = event(EventType="freeze", EventSource="USER")
    assert (parsed.event_type, parsed.source, parsed.problems) == ("Freeze", "User", ())


def test_an_unknown_event_source_matches_no_source_rule():
    parsed = event(EventSource="Customer")
    assert parsed.source == "Customer" and problems(parsed) == ["EventSource"]
    assert not Rule("users", "approve", {"source": "User"}).matches(parsed, "vm0", NOW)


# -- Resources -------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [None, "vm0", [1, 2], {"vm": "vm0"}])
def test_resources_that_cannot_be_read_may_be_this_vm_but_match_no_rule(value):
    parsed = event(Resources=value)
    assert problems(parsed) == ["Resources"]
    assert parsed.affects("vm0") and parsed.affects("any-vm")
    assert ce.event_data(parsed, 2, VM)["AffectsThisVm"] is True
    assert not Rule("mine", "approve", {"affects_this_vm": True}).matches(parsed, "vm0", NOW)
    assert not Rule("named", "approve", {"resources": "*"}).matches(parsed, "vm0", NOW)


def test_an_empty_resources_list_affects_no_vm():
    parsed = event(Resources=[])
    assert parsed.problems == () and not parsed.affects("vm0")


# -- DurationInSeconds -----------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "read"), [(5, 5), (5.0, 5), ("5", 5), (" -1", -1), (0, 0)])
def test_duration_written_as_a_number_or_its_text_is_read(value, read):
    parsed = event(DurationInSeconds=value)
    assert parsed.duration == read and parsed.problems == ()


@pytest.mark.parametrize("value", [True, -7, 2.5, "five", [5], float("inf")])
def test_an_odd_duration_is_unknown_and_never_approves_a_short_freeze(value):
    parsed = event(DurationInSeconds=value)
    assert parsed.duration is None and problems(parsed) == ["DurationInSeconds"]
    assert Policy(SAMPLE_RULES).decide(parsed, "vm0", NOW).action == "wait"
    assert Policy(SAMPLE_RULES).decide(event(), "vm0", NOW).action == "approve"


# -- ResourceType and Description ------------------------------------------------------------------

def test_resource_type_and_description_that_are_not_text_are_none():
    parsed = event(ResourceType=1, Description=["x"])
    assert (parsed.resource_type, parsed.description) == (None, None)
    assert problems(parsed) == ["ResourceType", "Description"]


def test_every_field_of_the_table_is_read_leniently():
    assert set(FIELDS) == {k for k in FULL if k != "EventId"}


# -- property: junk in one field of one event --------------------------------------------------------

MISSING = object()  # the field removed
PAST = email.utils.format_datetime(NOW - timedelta(minutes=1), usegmt=True)
FUTURE = email.utils.format_datetime(NOW + timedelta(minutes=10), usegmt=True)
IDS = ["A", "B", "C"]
junk = st.one_of(st.just(MISSING), st.none(), st.booleans(), st.integers(), st.floats(),
                 st.text(max_size=12), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def document_pairs(draw):
    """Two consecutive documents of clean IMDS events, and the EventIds this agent approved."""
    def raw(event_id: str, status: str, not_before: str) -> dict[str, Any]:
        return dict(FULL, EventId=event_id, EventStatus=status,
                    NotBefore=not_before if status == "Scheduled" else "",
                    EventType=draw(st.sampled_from(KNOWN_TYPES)),
                    EventSource=draw(st.sampled_from(KNOWN_SOURCES)),
                    DurationInSeconds=draw(st.integers(-1, 30)))
    previous, current = [], []
    for event_id in IDS:
        not_before = draw(st.sampled_from([PAST, FUTURE]))
        for doc in (previous, current):
            status = draw(st.sampled_from([None, "Scheduled", "Scheduled", "Started"]))
            if status:
                doc.append(raw(event_id, status, not_before))
    return previous, current, draw(st.sets(st.sampled_from(IDS)))


def transitions(previous: list, current: list, approved: set[str]) -> list[tuple]:
    before = parse_document({"DocumentIncarnation": 1, "Events": previous})
    after = parse_document({"DocumentIncarnation": 2, "Events": current})
    return [(t.event_id, t.state, t.inferred_from)
            for t in diff(before, after, approved=approved, now=NOW)]


def _is_a_date(value: Any) -> bool:
    """Whether the standard library reads ``value`` as a date with a zone (then it is no junk)."""
    if not isinstance(value, str):
        return False
    for read in (datetime.fromisoformat, email.utils.parsedate_to_datetime):
        try:
            if read(value.strip()) is not None:
                return True
        except (TypeError, ValueError, IndexError):
            pass
    return False


def documented(name: str, value: Any, junk_in_previous: bool, clean_raw: dict,
               previous: list, current: list, approved: set[str]) -> list[tuple] | None:
    """The junk event's transitions as event_fields.py says; None: the document is refused."""
    event_id = clean_raw["EventId"]
    own = [t for t in transitions(previous, current, approved) if t[0] == event_id]
    if name == "EventStatus":
        if not isinstance(value, str) or not value.strip():
            return None
        status = {"scheduled": "Scheduled"}.get(value.strip().casefold(), "Started")
        read = [dict(e, EventStatus=status) if e is clean_raw else e
                for e in (previous if junk_in_previous else current)]
        pair = (read, current) if junk_in_previous else (previous, read)
        return [t for t in transitions(*pair, approved) if t[0] == event_id]
    vanished_scheduled = junk_in_previous and clean_raw["EventStatus"] == "Scheduled" and \
        event_id not in {e["EventId"] for e in current}
    if name == "NotBefore" and vanished_scheduled and value not in (MISSING, None, ""):
        why = "approved" if event_id in approved else "not-before-unknown"
        return [(event_id, "started", why), (event_id, "completed", why)]
    if name == "NotBefore" and vanished_scheduled:  # no NotBefore at all: never passed
        why = "approved" if event_id in approved else None
        return [(event_id, "started", why), (event_id, "completed", why)] if why else \
            [(event_id, "canceled", None)]
    return own


# NotBefore and EventStatus, whose junk changes the event's own transitions, are drawn more often.
FIELD_CHOICES = [*FIELDS, "Extra", "NotBefore", "NotBefore", "EventStatus", "EventStatus"]


@settings(max_examples=500, deadline=None)
@given(document_pairs(), st.sampled_from(FIELD_CHOICES), junk, st.booleans(), st.integers(0, 2))
def test_junk_in_one_field_of_one_event_changes_only_that_event_and_only_as_documented(
        pair, name, value, junk_in_previous, index):
    previous, current, approved = pair
    target = previous if junk_in_previous else current
    assume(target)
    assume(not (name == "NotBefore" and _is_a_date(value)))
    clean_raw = target[index % len(target)]
    dirty_raw = {k: v for k, v in clean_raw.items() if k != name}
    if value is not MISSING:
        dirty_raw[name] = value
    dirty = [dirty_raw if e is clean_raw else e for e in target]
    dirty_pair = (dirty, current) if junk_in_previous else (previous, dirty)
    expected = documented(name, value, junk_in_previous, clean_raw, previous, current, approved)
    if expected is None:
        with pytest.raises(MalformedDocument):
            transitions(*dirty_pair, approved)
        return
    got = transitions(*dirty_pair, approved)
    event_id = clean_raw["EventId"]
    clean = transitions(previous, current, approved)
    assert [t for t in got if t[0] != event_id] == [t for t in clean if t[0] != event_id]
    assert [t for t in got if t[0] == event_id] == expected
    kept = parse_document({"DocumentIncarnation": 1, "Events": copy.deepcopy(dirty)})
    assert event_id in kept.by_id()  # the event is kept, never the document refused
