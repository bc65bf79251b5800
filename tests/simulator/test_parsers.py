"""Property tests for the simulator's parsers: any input gives a value or one clear error type."""

from __future__ import annotations

import json
import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from se_forwarder.simulator.faults import FaultError, parse_fault, parse_fault_flag
from se_forwarder.simulator.scenarios import ScenarioError, scenario_from_mapping
from se_forwarder.simulator.wire import (
    ApprovalError,
    check_event_fields,
    format_rfc1123,
    parse_rfc1123,
    parse_start_requests,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
event_keys = st.sampled_from(
    [
        "EventId",
        "EventType",
        "Resources",
        "EventStatus",
        "NotBefore",
        "Description",
        "EventSource",
        "DurationInSeconds",
        "NotBeforeInSeconds",
        "StartedSeconds",
        "at",
        "ref",
        "cancel_at",
        "Colour",
    ]
)
event_like = st.dictionaries(event_keys, json_values, max_size=5)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_start_requests_parser_returns_ids_or_approval_error(body):
    try:
        ids = parse_start_requests(body)
    except ApprovalError as exc:
        assert str(exc).startswith("Bad request.")
    else:
        assert all(isinstance(i, str) and i for i in ids)


@given(st.lists(st.uuids().map(str), max_size=5))
def test_start_requests_parser_round_trips_valid_bodies(ids):
    body = json.dumps({"StartRequests": [{"EventId": i} for i in ids]}).encode()
    assert parse_start_requests(body) == ids


@settings(max_examples=100, deadline=None)
@example({"events": [{"ref": [0]}]})
@example({"events": [{"at": float("inf")}]})
@example({"events": [{}], "actions": [{"at": 0, "do": "delete", "event": {}}]})
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "events": st.lists(event_like, max_size=3),
            "description": json_values,
            "params": json_values,
            "actions": json_values,
            "extra": json_values,
        },
    )
)
def test_scenario_parser_gives_a_scenario_or_one_line_scenario_error(data):
    try:
        scenario = scenario_from_mapping(data, "fuzz", "test")
    except ScenarioError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("scenario ")
    else:
        assert scenario.compile(("vm0", "vm1"))


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "status",
                "count",
                "delay_seconds",
                "hang",
                "body",
                "truncate",
                "huge_body",
                "incarnation_reset",
                "route",
                "vm",
                "method",
                "after_seconds",
                "size",
                "nope",
            ]
        ),
        json_values,
        max_size=4,
    )
)
def test_fault_parser_gives_a_fault_or_fault_error(spec):
    try:
        fault = parse_fault(spec, vm_names=("vm0",))
    except FaultError as exc:
        assert "\n" not in str(exc)
    else:
        assert fault.remaining >= 1


@given(st.text(max_size=40))
def test_fault_flag_parser_gives_a_dict_or_fault_error(text):
    try:
        spec = parse_fault_flag(text)
    except FaultError:
        return
    assert isinstance(spec, dict | list | str | int | float | bool) or spec is None


@settings(max_examples=100, deadline=None)
@given(event_like)
def test_event_field_check_gives_fields_or_value_error(fields):
    try:
        checked = check_event_fields(fields)
    except ValueError as exc:
        assert "\n" not in str(exc)
    else:
        assert set(checked) <= set(fields)


@given(st.floats(min_value=0, max_value=4102444800))
def test_not_before_is_rfc1123_and_parses_back_to_the_second(epoch):
    text = format_rfc1123(epoch)
    assert text.endswith(" GMT")
    assert parse_rfc1123(text) == math.floor(epoch)
