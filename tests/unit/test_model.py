"""The wire format parser: tolerant of older api-versions, strict about what is not a document
(how each field is read, and what a field that cannot be read means: ``test_event_fields.py``)."""

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.model import MalformedDocument, parse_document, parse_not_before

SAMPLE = {
    "DocumentIncarnation": 2,
    "Events": [
        {
            "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
            "EventType": "Freeze",
            "ResourceType": "VirtualMachine",
            "Resources": ["WestNO_0", "WestNO_1"],
            "EventStatus": "Scheduled",
            "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
            "Description": "Host server is undergoing maintenance.",
            "EventSource": "Platform",
            "DurationInSeconds": 5,
        }
    ],
}


def test_documented_example_parses_with_every_field():
    doc = parse_document(json.dumps(SAMPLE))
    event = doc.events[0]
    assert doc.incarnation == 2
    assert (event.event_type, event.status, event.source, event.duration) == (
        "Freeze", "Scheduled", "Platform", 5)
    assert event.resources == ("WestNO_0", "WestNO_1")
    assert event.not_before.isoformat() == "2022-04-11T22:26:58+00:00"


def test_event_of_api_version_2017_08_01_parses_without_newer_fields():
    raw = {k: v for k, v in SAMPLE["Events"][0].items()
           if k not in ("Description", "EventSource", "DurationInSeconds")}
    event = parse_document({"DocumentIncarnation": 1, "Events": [raw]}).events[0]
    assert event.description is None and event.source is None and event.duration is None


def test_started_event_with_empty_not_before_has_no_not_before():
    raw = dict(SAMPLE["Events"][0], EventStatus="Started", NotBefore="")
    assert parse_document({"DocumentIncarnation": 3, "Events": [raw]}).events[0].not_before is None


def test_raw_fields_are_kept_exactly_as_received():
    doc = parse_document(SAMPLE)
    assert dict(doc.events[0].raw) == SAMPLE["Events"][0]


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"",
        b"[]",
        b'{"Events": []}',
        b'{"DocumentIncarnation": "2", "Events": []}',
        b'{"DocumentIncarnation": true, "Events": []}',
        b'{"DocumentIncarnation": 2}',
        b'{"DocumentIncarnation": 2, "Events": {}}',
        b'{"DocumentIncarnation": 2, "Events": [1]}',
        b'{"DocumentIncarnation": 2, "Events": [{"EventType": "Freeze"}]}',
        b'{"DocumentIncarnation": 2, "Events": [{"EventId": "", "EventStatus": "Scheduled"}]}',
        b'{"DocumentIncarnation": 2, "Events": [{"EventId": 7, "EventStatus": "Scheduled"}]}',
        b'{"DocumentIncarnation": 2, "Events": [{"EventId": "a", "EventType": "Freeze"}]}',
        b'{"DocumentIncarnation": 2, "Events": [{"EventId": "a", "EventStatus": null}]}',
        b'{"DocumentIncarnation": 2, "Events": [{"EventId": "a", "EventStatus": 1}]}',
        b'{"DocumentIncarnation": 2, "Events": [{"EventId": "a", "EventStatus": " "}]}',
        b"\xff\xfe garbage",
    ],
)
def test_what_is_not_a_document_is_rejected(body):
    with pytest.raises(MalformedDocument):
        parse_document(body)


def test_duplicate_event_ids_are_rejected():
    doc = dict(SAMPLE, Events=[SAMPLE["Events"][0], SAMPLE["Events"][0]])
    with pytest.raises(MalformedDocument):
        parse_document(doc)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_either_parse_or_raise_malformed(body):
    with contextlib.suppress(MalformedDocument):
        parse_document(body)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["DocumentIncarnation", "Events", "EventId", "EventType", "EventStatus",
                         "NotBefore", "Resources", "DurationInSeconds", "x"]), children, max_size=6),
    max_leaves=20,
))
def test_arbitrary_json_values_either_parse_or_raise_malformed(value):
    with contextlib.suppress(MalformedDocument):
        parse_document(value)


@given(st.datetimes(min_value=__import__("datetime").datetime(1990, 1, 1),
                    max_value=__import__("datetime").datetime(2200, 1, 1)))
def test_not_before_round_trips_through_rfc_1123(moment):
    from datetime import UTC
    from email.utils import format_datetime

    moment = moment.replace(microsecond=0, tzinfo=UTC)
    assert parse_not_before(format_datetime(moment, usegmt=True)) == moment


def test_deeply_nested_json_is_a_malformed_document_not_a_crash():
    with pytest.raises(MalformedDocument):
        parse_document(b"[" * 100_000)


def test_not_before_that_lies_past_year_9999_in_utc_is_malformed_not_a_crash():
    with pytest.raises(MalformedDocument):
        parse_not_before("Fri, 31 Dec 9999 23:59:59 -2359")


def test_affects_this_vm_ignores_the_case_of_vm_names():
    event = parse_document(SAMPLE).events[0]
    assert event.affects("westno_0") and event.affects("WESTNO_1")
    assert not event.affects("WestNO_2") and not event.affects(None)
