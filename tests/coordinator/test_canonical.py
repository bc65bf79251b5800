"""The edge's orjson reading and canonical form give exactly what ``json`` gives (edge/canonical.py):
byte for byte the form an agent signs (approvals/signing.canonical) and the value ``json.loads``
reads, for every JSON value, those orjson writes or reads otherwise included."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator.edge import canonical

_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-2**70, max_value=2**70)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text()
            | st.text(alphabet=st.characters(max_codepoint=0x80)))
values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=30)
events = st.dictionaries(st.text(max_size=8), values, max_size=6).map(
    lambda d: {**d, "signature": "c2lnbmF0dXJl"})


def _same(a: object, b: object) -> bool:
    """Equal, telling -0.0 from 0.0 and ints from floats apart (json.dumps writes them apart)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and type(a) is type(b)


@settings(max_examples=200)
@given(events)
def test_the_canonical_form_is_byte_for_byte_the_signed_one(event):
    try:
        expected = signing.canonical(event)
    except (ValueError, TypeError) as exc:
        with pytest.raises(type(exc)):
            canonical.canonical(event)
        return
    assert canonical.canonical(event) == expected


@settings(max_examples=200)
@given(events)
def test_a_text_is_read_as_json_loads_reads_it_and_its_form_follows(event):
    text = json.dumps(event, ensure_ascii=False).encode("utf-8", "surrogatepass")
    value, plain = canonical.read(text)
    assert _same(value, json.loads(text))
    assert canonical.canonical(value, plain) == signing.canonical(json.loads(text))


@pytest.mark.parametrize("text", [
    b'{"a":123456789012345678901234567890}', b'{"a":-9223372036854775809}', b'{"a":18446744073709551616}',
    b'{"a":1e400}', b'{"a":NaN}', b'{"a":-Infinity}', b'{"a":"\\ud800"}', b'{"a":"\xed\xa0\x80"}',
    b'{"a":"\x7f","b":"\\u007f"}', b'{"a":1e-7,"b":1E16,"c":-0.0,"d":-0}', b'{"a":1,"a":2}',
    b'\xef\xbb\xbf{"a":1}', '{"a":"\u2028é"}'.encode(), b'{"a":{"z":1,"y":[{"b":2,"a":1}]}}',
])
def test_what_orjson_reads_or_writes_otherwise_is_read_and_written_by_json(text):
    expected = json.loads(text)
    value, plain = canonical.read(text)
    assert _same(value, expected) or (isinstance(value.get("a"), float) and math.isnan(value["a"])
                                      and math.isnan(expected["a"]))
    try:
        form = signing.canonical(expected)
    except ValueError:  # NaN and infinities: refused by both
        with pytest.raises(ValueError):
            canonical.canonical(value, plain)
        return
    assert canonical.canonical(value, plain) == form


def test_a_text_neither_reads_is_refused_as_json_loads_refuses_it():
    for text in (b'{"a":', b'{"a":"\x01"}', b"[1,]", b"\x00{}"):
        with pytest.raises(ValueError):
            json.loads(text)
        with pytest.raises(ValueError):
            canonical.read(text)


def test_tuples_and_subclasses_are_left_to_json():
    class Text(str):
        pass

    for event in ({"a": (1.5e-7, 2)}, {"a": Text("x")}, {1: "a"}):
        assert canonical.canonical(event) == signing.canonical(event)


def _only_plain_leaves(value: object) -> bool:
    if isinstance(value, dict) and type(value) is dict:
        return all(_only_plain_leaves(v) for v in value.values())
    if type(value) is list:
        return all(_only_plain_leaves(v) for v in value)
    return type(value) in (str, int, bool, type(None))


@settings(max_examples=300)
@given(values | st.recursive(_scalars, lambda inner: st.tuples(inner) | st.lists(inner, max_size=3)))
def test_a_value_is_plain_when_it_holds_no_float_and_nothing_but_json_types(value):
    assert canonical.plain(value) == _only_plain_leaves(value)


def test_a_value_nested_deeper_than_the_interpreter_recurses_is_not_plain():
    deep: list[object] = []
    inner = deep
    for _ in range(20_000):
        inner.append([])
        inner = inner[0]  # type: ignore[assignment]
    assert canonical.plain(deep) is False
    assert canonical.plain({"a": [[1, "x", None, True]]}) is True


@pytest.mark.parametrize("data", [{"n": 2**70}, {"f": 1e-7}, {"s": "é\x7f"}, {"plain": [1, "a", None]}])
def test_the_reader_decodes_an_event_as_json_loads_does(data):
    from azure.eventhub import EventData

    from se_forwarder.fleet.coordinator.input.hub_reader import decode_text

    text = json.dumps({"specversion": "1.0", "type": "t", "id": "1", "source": "s", "data": data}).encode()
    event, kept = decode_text(EventData(text))
    assert _same(event, json.loads(text)) and kept == text


@given(st.integers(min_value=0, max_value=2**62), st.integers(min_value=0, max_value=2**40),
       st.integers(min_value=0, max_value=4_102_444_800_000) | st.none())
def test_the_reader_reads_an_events_position_as_the_sdks_properties_give_it(sequence, offset, enqueued):
    from azure.eventhub import EventData
    from azure.eventhub._pyamqp.message import Message  # the SDK's own message type, as received

    from se_forwarder.fleet.coordinator.input.hub_reader import _positions

    notes = {b"x-opt-sequence-number": sequence, b"x-opt-offset": str(offset).encode()}
    if enqueued is not None:
        notes[b"x-opt-enqueued-time"] = enqueued
    event = EventData._from_message(Message(data=[b"{}"], message_annotations=notes))
    [position] = _positions([event])
    when = event.enqueued_time
    assert (position.sequence, position.offset) == (event.sequence_number, str(event.offset))
    assert position.enqueued == (when.timestamp() if when is not None else None)
