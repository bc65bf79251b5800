"""The snapshot's and the digest's JSON (fold/snapshot.encode): what the standard library reads back is
the value written, whatever it holds, and the canonical form does not depend on the order of members."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.fold.snapshot import encode

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_what_is_written_reads_back_as_the_same_value(value):
    assert json.loads(encode(value)) == value
    assert json.loads(encode(value, sort=True)) == value


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), VALUES, max_size=6), st.randoms(use_true_random=False))
def test_the_canonical_form_does_not_depend_on_the_order_of_members(value, rng):
    items = list(value.items())
    rng.shuffle(items)
    assert encode(dict(items), sort=True) == encode(value, sort=True)


def test_an_integer_beyond_64_bits_is_written_exactly():
    held = {"data": {"Backlog": 10**30}}
    assert json.loads(encode(held)) == held
    assert encode(held, sort=True) == b'{"data":{"Backlog":1000000000000000000000000000000}}'
